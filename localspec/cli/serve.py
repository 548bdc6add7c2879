"""``localspec serve``: the loaded pair over an OpenAI-compatible HTTP API (``localspec.serve``).

Safe by default: it binds to 127.0.0.1, and any other address needs an API key (``--api-key``
or ``LOCALSPEC_API_KEY``), since the API runs the models for whoever can reach it. Web pages
get in only where --cors and --allow-host say (``guard.Guard``).

Every option, and the address itself, is checked before the models load: the socket is bound
first. Exit codes: 0 after SIGINT or SIGTERM, 2 an option refused, 3 an incompatible pair (as
``localspec run``), 5 the address cannot be listened on (a port in use, not this machine's).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import re
import socket
import sys
from pathlib import Path

from .run import add_model_options, load_session

KEY_ENV = "LOCALSPEC_API_KEY"  # keeps the key out of the process list
EXIT_CANNOT_LISTEN = 5  # 2 is a refused option and 3 an incompatible pair, as in `localspec run`
# an origin as browsers send it: scheme://host[:port], no path (editors' pages have schemes of
# their own, such as app://obsidian.md or vscode-webview://...)
ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s]+")


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the pair over an OpenAI-compatible HTTP API")
    p.add_argument(
        "--pair",
        help="catalog pair id, with its default draft (default: the default "
        "pair, when --target is not given); the files must be on disk",
    )
    add_model_options(p, target_required=False)  # --pair may name the files instead
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs --api-key)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0 picks a free one)")
    p.add_argument("--api-key", default=None, help=f"require 'Authorization: Bearer KEY' (or set {KEY_ENV})")
    p.add_argument(
        "--queue", type=int, default=8, help="requests that may wait while one generates; more get 503 (default 8)"
    )
    p.add_argument(
        "--cors",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from ORIGIN to call the API (repeatable; default: none)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="accept requests sent to this host name too (repeatable; default: loopback names and --host)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_serve)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_bind(host: str, api_key: str | None) -> str | None:
    """Why binding ``host`` is refused, or None."""
    if not is_loopback(host) and not api_key:
        return (
            f"refusing to serve on {host} without an API key: anyone who can reach it could "
            f"use the models. Pass --api-key KEY (or set {KEY_ENV}), or bind 127.0.0.1."
        )
    if api_key is not None and len(api_key) < 8:
        return "the API key is too short: use at least 8 characters"
    return None


def check_options(args) -> str | None:
    """Why the serve options are refused, or None; all of it before anything loads."""
    return (
        check_bind(args.host, args.api_key)
        or ("--queue must be 0 or more" if args.queue < 0 else None)
        or check_port(args.port)
        or next(filter(None, map(check_origin, args.cors)), None)
        or next(filter(None, map(check_host_name, args.allow_host)), None)
    )


def check_port(port: int) -> str | None:
    if port < 0:
        return f"--port must be ≥ 0 (got {port}); 0 picks a free port"
    if port > 65535:
        return f"--port must be ≤ 65535 (got {port})"
    return None


def check_origin(origin: str) -> str | None:
    """A --cors value must be an origin as browsers send it, or it would never match one."""
    if origin in ("*", "null") or ORIGIN.fullmatch(origin):
        return None
    example = "http://localhost:5173"
    return f"--cors takes an origin, scheme://host[:port] with no path, such as {example} (got {origin!r})"


def check_host_name(name: str) -> str | None:
    from ..serve.guard import host_name

    if host_name(name) and not re.search(r"[/@*\s]", name):
        return None
    return f"--allow-host takes a host name or address, such as myhost.lan (got {name!r})"


def listen_problem(e: OSError, host: str, port: int) -> str:
    """Why ``host``:``port`` cannot be listened on, in words."""
    where = f"{host}:{port}" if port else host
    if isinstance(e, socket.gaierror):
        return f"cannot listen on {host}: the name does not resolve ({e.strerror})"
    why = {
        errno.EADDRINUSE: "the port is in use (is another server running?); stop it or pick another --port",
        errno.EACCES: "permission denied (ports below 1024 need root); pick a --port of 1024 or more",
        errno.EADDRNOTAVAIL: f"{host} is not an address of this machine",
    }.get(e.errno or 0, e.strerror or str(e))
    return f"cannot listen on {where}: {why}"


def resolve_pair(args) -> str | None:
    """With --pair (or neither --pair nor --target): fill in args.target / args.draft from the
    catalog; returns the pair id, the model's name in the API, or None with --target."""
    from ..models import catalog as cat
    from ..models.downloads import locate
    from ..settings import load_settings

    if args.target is not None:
        if args.pair:
            raise SystemExit("localspec serve: give --pair or --target, not both")
        return None
    settings, _ = load_settings()
    catalog, _ = cat.load_catalog(settings)
    try:
        pair = catalog.get(args.pair) if args.pair else catalog.default
    except cat.UnknownPair as e:
        raise SystemExit(f"localspec serve: {e}") from None
    chosen = args.lookup or args.no_draft or args.draft or args.mtp
    wanted_draft = None if chosen else pair.default_draft
    args.mtp = args.mtp or (not chosen and pair.default_is_mtp)  # the target drafts for itself
    target = locate(pair.target, settings)
    draft = locate(wanted_draft, settings) if wanted_draft else args.draft
    if target is None or (wanted_draft and draft is None):
        raise SystemExit(
            f"localspec serve: the files of pair {pair.id!r} are not on disk; run: localspec models pull {pair.id}"
        )
    args.target, args.draft = Path(target), Path(draft) if draft else None
    return pair.id


def cmd_serve(args) -> int:
    from ..serve import serving

    args.api_key = args.api_key or os.environ.get(KEY_ENV) or None
    problem = check_options(args)
    if problem:
        print(f"localspec serve: {problem}", file=sys.stderr)
        return 2
    model_id = resolve_pair(args) or args.target.stem
    try:
        sockets = serving.listening_sockets(args.host, args.port)
    except OSError as e:
        print(f"localspec serve: {listen_problem(e, args.host, args.port)}", file=sys.stderr)
        return EXIT_CANNOT_LISTEN
    try:
        serve_pair(args, model_id, sockets)
    finally:
        for sock in sockets:  # uvicorn closes them when it ran; not when the load failed
            sock.close()
    return 0


def serve_pair(args, model_id: str, sockets: list[socket.socket]) -> None:
    """Load the pair and serve it on ``sockets`` until SIGINT or SIGTERM; then save the profile
    and close the models (``Session.close``) once the reply still running has stopped. The load,
    every reply and the close run on one thread (``generations.llama_thread``: why)."""
    from ..serve.generations import llama_thread

    llama = llama_thread()
    try:
        session = llama.submit(load_session, args).result()
        _serve_session(args, model_id, sockets, session, llama)
    finally:
        llama.shutdown(wait=True)


def _serve_session(args, model_id: str, sockets: list[socket.socket], session, llama) -> None:
    from ..serve import server, serving
    from ..serve.api import Served

    for warning in session.replies.warnings if session.replies else ():
        print(f"note: {warning}", file=sys.stderr)
    served = Served(
        model_id,
        frozenset({args.target.name, args.target.stem}),
        session.mode,
        session.draft is not None,
        session.target.n_ctx,
        session.options.draft_max,
    )
    config = server.ServerConfig(
        api_key=args.api_key,
        queue=args.queue,
        cors_origins=tuple(args.cors),
        host=args.host,
        allow_hosts=tuple(args.allow_host),
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:  %(message)s")
    host = f"[{args.host}]" if ":" in args.host else args.host
    port = sockets[0].getsockname()[1]  # the one picked, with --port 0
    print(f"serving {model_id} ({session.mode}) at http://{host}:{port}/v1", file=sys.stderr)
    try:
        serving.serve(server.make_app(session, served, config, llama), sockets, args.log_level)
    finally:
        llama.submit(session.close).result()
