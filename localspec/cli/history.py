"""``localspec history``: the past replies kept to draft from (``localspec.chat.history``), one
history per tokenizer; ``localspec history clear`` forgets them all.

Exit codes: 0 done, 1 the history folder could not be read or cleared.
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import asdict

from ..chat.history import HistoryStore, HistorySummary
from ..settings import load_settings
from ..units import human_bytes_si
from .models import table

ABOUT = (
    "The token ids of the replies this machine gave before, each with the last 24 tokens of its prompt "
    "(their texts are in the chat store), one history per tokenizer: a reply that repeats earlier work "
    "drafts from them. "
    "--no-history, or the draft.history setting off, neither reads nor keeps them."
)
WIDTH = 100  # the explanation is wrapped to this many columns


def replies(n: int) -> str:
    return f"{n:,} past {'reply' if n == 1 else 'replies'}"


def register(sub) -> None:
    p = sub.add_parser("history", help="show (or clear) the past replies kept to draft from", description=ABOUT)
    p.add_argument("--json", action="store_true", help="print the listing as one JSON object")
    p.set_defaults(func=cmd_list)
    actions = p.add_subparsers(dest="history_command")
    clear = actions.add_parser("clear", help="forget every past reply kept (the chats stay)")
    clear.set_defaults(func=cmd_clear)


def cmd_list(args) -> int:
    settings, warning = load_settings()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    store = HistoryStore()
    try:
        kept = store.summary()
    except OSError as e:
        print(f"localspec history: {store.root} cannot be read ({e})", file=sys.stderr)
        return 1
    for s in kept:
        for w in s.warnings:
            print(f"warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(as_json(store, kept, settings.draft.history), default=str, ensure_ascii=False))
    else:
        print(render(store, kept, settings.draft.history))
    return 0


def as_json(store: HistoryStore, kept: list[HistorySummary], enabled: bool) -> dict:
    return {"root": str(store.root), "enabled": enabled, "histories": [asdict(s) for s in kept]}


def render(store: HistoryStore, kept: list[HistorySummary], enabled: bool) -> str:
    state = "on" if enabled else "off (the draft.history setting)"
    lines = [textwrap.fill(ABOUT, WIDTH), f"drafting from history: {state}", ""]
    if not kept:
        return "\n".join([*lines, f"nothing kept yet (it would be kept in {store.root})"])
    rows = [("TOKENIZER", "REPLIES", "TOKENS", "SIZE", "PATH")]
    rows += [(s.key, f"{s.replies:,}", f"{s.tokens:,}", human_bytes_si(s.size_bytes), str(s.path)) for s in kept]
    total = f"{replies(sum(s.replies for s in kept))}, {human_bytes_si(sum(s.size_bytes for s in kept))} on disk"
    return "\n".join([*lines, table(rows), "", f"{total}; localspec history clear forgets them"])


def cmd_clear(args) -> int:
    store = HistoryStore()
    try:
        forgotten = store.clear()
    except OSError as e:
        print(f"localspec history clear: {store.root}: not everything could be forgotten ({e})", file=sys.stderr)
        return 1
    if forgotten:
        print(f"forgot {replies(forgotten)} (kept in {store.root}); the chats are untouched")
    else:
        print(f"nothing to forget (nothing kept in {store.root})")
    return 0
