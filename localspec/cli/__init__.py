"""The command line: ``localspec`` (the chat app), ``localspec run``, ``models``, ``bench``,
``doctor``, ``serve``, ``history``.

Each subcommand lives in its own module here and exposes ``register(subparsers)``; this is
one adapter (the CLI) split by command, and the only place besides the TUI that prints.
"""

from __future__ import annotations

import argparse
import sys

# first: llama.cpp's libraries load before any other native module (llama/native.py says why)
from ..llama import native
from . import bench, doctor, history, models, run, serve

COMMANDS = (run, models, bench, doctor, serve, history)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localspec",
        description="Chat with local GGUF models, faster, with speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command")
    for module in COMMANDS:
        module.register(sub)
    from . import app_args

    app_args.add_app_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from . import app_args

            return app_args.open_app(args)
        return int(args.func(args) or 0)
    except (ImportError, OSError):
        if native.PROBLEM is None:  # llama.cpp loads: not this
            raise
        print(
            f"error: llama-cpp-python cannot be loaded ({native.PROBLEM}); `localspec doctor` says how to reinstall it",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
