"""``localspec`` with no subcommand opens the Textual chat app."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path


def add_app_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target GGUF: open a chat with this pair directly")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--draft", help="draft GGUF for --target")
    group.add_argument(
        "--lookup",
        action="store_true",
        help="drafts from suffix matches over the context and past replies (prompt lookup), no draft model",
    )
    group.add_argument(
        "--mtp", action="store_true", help="draft with the target's own MTP layers (automatic when it has them)"
    )


def app_spec(args: argparse.Namespace):
    """The pair given on the command line, or None (the app then opens the default or the menu)."""
    from ..chat.session import PairSpec
    from ..llama import ggufinfo
    from ..models.catalog import target_mtp

    if getattr(args, "draft", None) and not getattr(args, "target", None):
        raise SystemExit("localspec: --draft needs --target")
    for flag in ("lookup", "mtp"):
        if getattr(args, flag, False) and not getattr(args, "target", None):
            raise SystemExit(f"localspec: --{flag} needs --target")
    if not getattr(args, "target", None):
        return None
    target = Path(args.target).expanduser()
    draft = Path(args.draft).expanduser() if args.draft else None
    for p in (target, draft):
        not_file = ggufinfo.not_a_file(p) if p is not None else None
        if not_file:
            raise SystemExit(f"localspec: {p}: {not_file}")
    mtp = bool(getattr(args, "mtp", False)) or (not draft and not args.lookup and target_mtp(target).present)
    return PairSpec(target, draft, bool(args.lookup), mtp=mtp)


@contextmanager
def native_stderr_to(path: Path):
    """llama.cpp writes its logs to file descriptor 2 from C, where Textual draws the screen
    (Textual writes to ``sys.__stderr__``). While the app runs, fd 2 goes to a log file and
    Textual gets its own duplicate of the terminal, so C-level messages never tear the screen."""
    if not os.isatty(2):
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    term_fd = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = sys.__stderr__, sys.stderr
    term = os.fdopen(
        term_fd, "w", buffering=1, encoding=getattr(sys.__stderr__, "encoding", None) or "utf-8", errors="replace"
    )
    os.dup2(log_fd, 2)
    # typeshed marks sys.__stderr__ Final; Textual draws on it, so it is the one to replace
    sys.__stderr__ = sys.stderr = term  # type: ignore[misc]
    try:
        yield
    finally:
        term.flush()
        os.dup2(term_fd, 2)
        sys.__stderr__, sys.stderr = saved  # type: ignore[misc]
        term.close()
        os.close(log_fd)


def open_app(args: argparse.Namespace) -> int:
    from ..settings import data_dir, load_settings

    spec = app_spec(args)
    settings, warning = load_settings()
    with native_stderr_to(data_dir() / "llama.log"):
        from ..tui.app import LocalspecApp

        LocalspecApp(settings, settings_warning=warning, spec=spec).run()
    return 0
