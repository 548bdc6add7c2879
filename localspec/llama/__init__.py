"""The llama.cpp adapter: the only code that loads llama_cpp (``backend``; ``native`` loads its
libraries before the CLI's other native modules), and what is read or
planned around it without loading a model: GGUF headers (``ggufinfo``), pair compatibility
(``compat``), GPU offload plans (``offload``) and the checks before a load (``preflight``)."""
