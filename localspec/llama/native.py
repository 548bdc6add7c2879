"""llama.cpp's shared libraries, loaded on import: the CLI imports this before any other native
module. With a CUDA build, loading a model crashed inside llama_model_load_from_file when numpy
and the rest of the CLI's imports came first, and loaded when llama_cpp did
(scripts/gpu-check.sh checks the order on a GPU; tests/cli/test_import_order.py here)."""

import llama_cpp  # noqa: F401
