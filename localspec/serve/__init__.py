"""``localspec serve``: an OpenAI-compatible HTTP API (``api``: requests and replies) over a
session (``server``: the ASGI app and its routes; ``guard``: what a request must be before they
run; ``generations``: one reply at a time, the rest queued; ``serving``: sockets and uvicorn)."""
