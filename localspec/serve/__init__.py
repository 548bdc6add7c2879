"""``localspec serve``: an OpenAI-compatible HTTP API (``api``: requests and replies) over a
session (``server``: the ASGI app, its guard and its job queue)."""
