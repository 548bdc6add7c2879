"""llama.cpp's shared libraries, loaded on import: the CLI imports this before any other native
module. With a CUDA build, loading a model crashed inside llama_model_load_from_file when numpy
and the rest of the CLI's imports came first, and loaded when llama_cpp did
(scripts/gpu-check.sh checks the order on a GPU; tests/cli/test_import_order.py here).

A build that cannot be loaded (a missing or mismatched shared library) is kept in ``PROBLEM``
instead of stopping the CLI: commands that need no model still run, and ``localspec doctor``
says what failed and how to reinstall."""

PROBLEM: str | None = None
try:
    import llama_cpp  # noqa: F401
except (ImportError, OSError) as e:  # OSError: ctypes could not load libllama
    PROBLEM = f"{type(e).__name__}: {e}"
