"""llama.cpp's shared libraries, loaded on import: the CLI imports this before any other native
module. With a CUDA build, loading a model crashes inside llama_model_load_from_file in a
process that imported numpy (or gguf, which imports it) before llama_cpp, and loads when llama_cpp
came first (scripts/gpu-check.sh checks the order on a GPU; tests/cli/test_import_order.py here).

A build that cannot be loaded (a missing or mismatched shared library) is kept in ``PROBLEM``
instead of stopping the CLI: commands that need no model still run, and ``localspec doctor``
says what failed and how to reinstall."""

PROBLEM: str | None = None
try:
    import llama_cpp  # noqa: F401
except (ImportError, OSError) as e:  # OSError: ctypes could not load libllama
    PROBLEM = f"{type(e).__name__}: {e}"
