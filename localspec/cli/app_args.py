"""``localspec`` with no subcommand opens the Textual app (issue 4 fills this in)."""

from __future__ import annotations

import argparse


def add_app_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target GGUF: open a chat with this pair directly")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--draft", help="draft GGUF for --target")
    group.add_argument("--lookup", action="store_true", help="prompt-lookup drafting, no draft model")


def open_app(args: argparse.Namespace) -> int:
    raise SystemExit("the chat app is not built yet; use `localspec run`")
