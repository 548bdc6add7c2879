"""``localspec serve``: the loaded pair over an OpenAI-compatible HTTP API (``localspec.server``).

Safe by default: it binds to 127.0.0.1, and any other address needs an API key (``--api-key``
or ``LOCALSPEC_API_KEY``), since the API runs the models for whoever can reach it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from pathlib import Path

from .run import add_model_options, load_session

KEY_ENV = "LOCALSPEC_API_KEY"  # keeps the key out of the process list


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the pair over an OpenAI-compatible HTTP API")
    p.add_argument(
        "--pair",
        help="catalog pair id, with its default draft (default: the default "
        "pair, when --target is not given); the files must be on disk",
    )
    add_model_options(p, target_required=False)  # --pair may name the files instead
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs --api-key)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
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


def resolve_pair(args) -> str | None:
    """With --pair (or neither --pair nor --target): fill in args.target / args.draft from the
    catalog; returns the pair id, the model's name in the API, or None with --target."""
    from .. import catalog as cat
    from ..downloads import locate
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
    wanted_draft = not (args.lookup or args.no_draft or args.draft)
    target = locate(pair.target, settings)
    draft = locate(pair.drafts[0], settings) if wanted_draft else args.draft
    if target is None or (wanted_draft and draft is None):
        raise SystemExit(
            f"localspec serve: the files of pair {pair.id!r} are not on disk; run: localspec models pull {pair.id}"
        )
    args.target, args.draft = Path(target), Path(draft) if draft else None
    return pair.id


def cmd_serve(args) -> int:
    from .. import server
    from ..api import Served

    args.api_key = args.api_key or os.environ.get(KEY_ENV) or None
    refusal = check_bind(args.host, args.api_key)
    if refusal:
        print(f"localspec serve: {refusal}", file=sys.stderr)
        return 2
    if args.queue < 0:
        print("localspec serve: --queue must be 0 or more", file=sys.stderr)
        return 2
    model_id = resolve_pair(args) or args.target.stem
    session = load_session(args)
    served = Served(
        model_id,
        frozenset({args.target.name, args.target.stem}),
        session.mode,
        session.draft is not None,
        session.target.n_ctx,
    )
    config = server.ServerConfig(api_key=args.api_key, queue=args.queue, cors_origins=tuple(args.cors))
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:  %(message)s")
    print(f"serving {model_id} ({session.mode}) at http://{args.host}:{args.port}/v1", file=sys.stderr)
    try:
        server.serve(server.make_app(session, served, config), args.host, args.port, args.log_level)
    finally:
        session.close()
    return 0
