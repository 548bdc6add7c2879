"""Record a real pair's verdicts for the bench's ``verdicts`` mode (``localspec/bench/verdicts.py``).

For every prompt of the suites: the target's greedy reply (``bench.replay.record``, which also
measures the target's cost curve on the way; ``--replies FILE`` keeps them, and a later run with
the same file reads them instead), then a batched evaluation of prompt + reply by the draft model,
logits on the reply's rows (in pieces of the most rows one evaluation gives): at each position,
whether the draft's greedy token after the true prefix is the reply's, and its confidence. The
file is small enough to ship (``localspec/bench/traces/``); its name, less ``.json``, is the pair's.

    .venv/bin/python scripts/record_verdicts.py models/qwen2.5-coder-1.5b.gguf models/qwen2.5-coder-0.5b.gguf \\
        --max-tokens 128 --threads 2 --replies /tmp/replies.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from importlib import metadata
from pathlib import Path

from localspec.bench import replay, suites, verdicts
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.llama.backend import MAX_LOGIT_ROWS
from localspec.lockedfile import write_atomic

OUT = Path(__file__).parents[1] / "localspec" / "bench" / verdicts.TRACES / f"{verdicts.DEFAULT_PAIR}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--suites", default="default,heldout", help="comma-separated suite names or files")
    ap.add_argument("--max-tokens", type=int, default=replay.REPLY_TOKENS, help="reply tokens recorded per prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=OUT, help="the recording (its name, less .json, is the pair's)")
    ap.add_argument("--replies", type=Path, default=None, help="keep the target's replies here, or read them if there")
    args = ap.parse_args(argv)
    prompts = [{**p, "suite": suite_name(s)} for s in args.suites.split(",") for p in suites.load_suite(s)["prompts"]]
    options = LoadOptions(n_ctx=args.ctx, threads=args.threads)
    session = Session.load(PairSpec(args.target, args.draft), options)  # no profile: nothing kept in the data dir
    try:
        recorded = record(session, prompts, args.max_tokens, args.out.name.removesuffix(".json"), args.replies)
    finally:
        session.close()
    write_atomic(args.out, json.dumps(verdicts.as_json(recorded), separators=(",", ":")) + "\n")
    for suite, s in verdicts.summary(recorded).items():
        print(f"{suite}: {s['positions']:.0f} positions, {s['agree']:.1%} agree, mean confidence {s['confidence']:.2f}")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


def suite_name(name_or_path: str) -> str:
    return name_or_path if name_or_path in suites.BUILTIN_SUITES else Path(name_or_path).stem


def record(
    session, prompts: list[dict], max_tokens: int, pair: str, keep: Path | None = None
) -> verdicts.RecordedVerdicts:
    """The target's greedy replies (kept in, or read from, ``keep``), then the draft's verdict on
    each of their positions."""
    replies = target_replies(session, prompts, max_tokens, keep)
    banned = session.compat.banned_draft_ids if session.compat else frozenset()
    judged = {}
    for prompt, rec in zip(prompts, replies):
        agree, confidence = judge_reply(session.draft, rec["prompt"], rec["reply"], session.target.n_vocab, banned)
        judged[rec["id"]] = verdicts.PromptVerdicts(rec["id"], prompt["suite"], agree, confidence)
    return verdicts.RecordedVerdicts(
        pair=pair,
        target=session.spec.target.name,
        draft=session.spec.draft.name,
        llama_cpp_python=metadata.version("llama-cpp-python"),
        date=datetime.date.today().isoformat(),
        prompts=judged,
    )


def target_replies(session, prompts: list[dict], max_tokens: int, keep: Path | None) -> list[dict]:
    """Per prompt its id, tokens and the target's greedy reply: read from ``keep`` where it holds
    these prompts' replies of this length (running the target is the slow part), else run."""
    if keep and keep.exists():
        kept = json.loads(keep.read_text("utf-8"))
        if kept.get("max_tokens") == max_tokens and [r["id"] for r in kept["prompts"]] == [p["id"] for p in prompts]:
            return kept["prompts"]
    say = lambda pid, n_prompt, n_reply: print(f"{pid}: {n_prompt} prompt tokens, {n_reply} reply", file=sys.stderr)
    replies = replay.record(session, prompts, max_tokens, on_prompt=say)["prompts"]
    if keep:
        write_atomic(keep, json.dumps({"max_tokens": max_tokens, "prompts": replies}))
    return replies


def judge_reply(draft, context: list[int], reply: list[int], n_vocab: int, banned) -> tuple[tuple, tuple]:
    """Each position's verdict: row p of the draft follows context + reply[:p], so a piece of
    positions [start, end) is the last end - start rows of context + reply[:end - 1]; the cache
    keeps what each piece read, so the pieces together read prompt + reply once."""
    agree: tuple[bool, ...] = ()
    confidence: tuple[float, ...] = ()
    for start in range(0, len(reply), MAX_LOGIT_ROWS):
        end = min(start + MAX_LOGIT_ROWS, len(reply))
        rows = draft.sync(context + reply[: end - 1], n_logits=end - start)
        a, c = verdicts.judge(rows, context + reply[:start], reply[start:end], n_vocab, banned)
        agree, confidence = agree + a, confidence + c
    return agree, confidence


if __name__ == "__main__":
    sys.exit(main())
