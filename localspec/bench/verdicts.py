"""A real pair's verdicts, recorded once and shipped with the package (``traces/*.json``): per
prompt of the bench suites, at each position p of the target's greedy reply, whether the draft
model's greedy token after the true prefix (prompt + reply[:p]) is reply[p] (``agree``), and the
draft's confidence there.

Under greedy decoding this decides every draft: a draft of k tokens from position p keeps the
run of agreeing positions from p, at most k (after a wrong token nothing is kept, whatever the
draft proposed next). So the bench's ``verdicts`` mode (``modes.VerdictReplay``) can replay the
real pair's acceptance on models whose own acceptance means nothing, such as random weights of
the same shapes on a GPU machine, while paying the real cost of drafting there.

The draft's rows come from batched evaluations of prompt + reply (in pieces of the most logit
rows one evaluation gives), where llama.cpp's kernels can shift a logit slightly from a one-token
pass: at a near-tie a position may read otherwise than drafting token by token would.
``scripts/record_verdicts.py`` writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..core.drafters import choose_token, fit_vocab
from ..core.sampling import SamplingParams

TRACES = "traces"  # the shipped recordings, beside the suites in localspec/bench
DEFAULT_PAIR = "qwen2.5-coder-1.5b+0.5b"  # the default pair's: Qwen2.5-Coder 1.5B Q4_K_M + 0.5B


@dataclass(frozen=True)
class PromptVerdicts:
    """One prompt's verdicts, by reply position."""

    prompt_id: str
    suite: str
    agree: tuple[bool, ...]  # the draft's greedy token after the true prefix is the reply's
    confidence: tuple[float, ...]  # the draft's top probability there, to the percent (0..1)

    def __len__(self) -> int:
        return len(self.agree)


@dataclass(frozen=True)
class RecordedVerdicts:
    """A recording: the pair, what ran it, and its prompts by id."""

    pair: str
    target: str  # the model files' names
    draft: str
    llama_cpp_python: str
    date: str
    prompts: dict[str, PromptVerdicts]

    def get(self, prompt_id: str) -> PromptVerdicts | None:
        return self.prompts.get(prompt_id)


def judge(
    rows: Sequence[np.ndarray], context: Sequence[int], reply: Sequence[int], n_vocab: int, banned: Iterable[int] = ()
) -> tuple[tuple[bool, ...], tuple[float, ...]]:
    """Each reply position's verdict from the draft's rows: row p is the draft's after
    ``context`` + reply[:p]. The token and its confidence are chosen as the draft model chooses
    them (``drafters.choose_token`` on the target's ``n_vocab``, ``banned`` ids never proposed)."""
    params, off = SamplingParams(), np.array(sorted(banned), dtype=np.int64)
    history = list(context)
    agree, confidence = [], []
    for token, row in zip(reply, rows):
        top, _, p_top = choose_token(fit_vocab(np.asarray(row), n_vocab, off), history, params, None)
        agree.append(top == token)
        confidence.append(p_top)
        history.append(token)
    return tuple(agree), tuple(confidence)


def summary(recorded: RecordedVerdicts) -> dict[str, dict[str, float]]:
    """Per suite: reply positions, the share of them where the draft agrees, its mean confidence."""
    out: dict[str, dict[str, float]] = {}
    for suite in dict.fromkeys(p.suite for p in recorded.prompts.values()):
        mine = [p for p in recorded.prompts.values() if p.suite == suite]
        n = sum(len(p) for p in mine)
        out[suite] = {
            "positions": n,
            "agree": sum(sum(p.agree) for p in mine) / n if n else 0.0,
            "confidence": sum(sum(p.confidence) for p in mine) / n if n else 0.0,
        }
    return out


def as_json(recorded: RecordedVerdicts) -> dict:
    """The file's form: agree as a string of '0'/'1', confidence in whole percent (small enough
    to ship: a few bytes a position)."""
    head = {k: getattr(recorded, k) for k in ("pair", "target", "draft", "llama_cpp_python", "date")}
    prompts = [
        {
            "id": p.prompt_id,
            "suite": p.suite,
            "n": len(p),
            "agree": "".join("1" if a else "0" for a in p.agree),
            "confidence": [round(100 * c) for c in p.confidence],
        }
        for p in recorded.prompts.values()
    ]
    return {**head, "prompts": prompts}


def from_json(data: dict) -> RecordedVerdicts:
    """A recording from its file's form; ValueError naming what is malformed."""
    head = ("pair", "target", "draft", "llama_cpp_python", "date")
    if not isinstance(data, dict) or not {*head, "prompts"} <= set(data) or not isinstance(data["prompts"], list):
        raise ValueError(f"not a recording of scripts/record_verdicts.py (it has {', '.join(head)} and prompts)")
    prompts = [_prompt(p) for p in data["prompts"]]
    return RecordedVerdicts(**{k: str(data[k]) for k in head}, prompts={p.prompt_id: p for p in prompts})


def _prompt(p: dict) -> PromptVerdicts:
    pid = p.get("id") if isinstance(p, dict) else None
    if not isinstance(pid, str):
        raise ValueError("a prompt without an id")
    agree, conf, n = p.get("agree"), p.get("confidence"), p.get("n")
    if not isinstance(agree, str) or set(agree) - {"0", "1"} or len(agree) != n:
        raise ValueError(f"prompt {pid}: agree must be n characters '0' or '1'")
    if not isinstance(conf, list) or len(conf) != n or not all(isinstance(c, int) and 0 <= c <= 100 for c in conf):
        raise ValueError(f"prompt {pid}: confidence must be n whole percents, 0 to 100")
    return PromptVerdicts(pid, str(p.get("suite", "")), tuple(a == "1" for a in agree), tuple(c / 100 for c in conf))


def shipped() -> list[str]:
    """The recordings shipped with the package, by name."""
    folder = resources.files("localspec.bench").joinpath(TRACES)
    if not folder.is_dir():
        return []
    return sorted(f.name.removesuffix(".json") for f in folder.iterdir() if f.name.endswith(".json"))


def load(name_or_path: str) -> RecordedVerdicts:
    """A shipped recording by name, or a file; ValueError saying why it cannot be read."""
    try:
        if name_or_path in shipped():
            text = resources.files("localspec.bench").joinpath(f"{TRACES}/{name_or_path}.json").read_text("utf-8")
        else:
            text = Path(name_or_path).read_text("utf-8")
        return from_json(json.loads(text))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        raise ValueError(f"{name_or_path}: cannot read recorded verdicts ({e}; shipped: {', '.join(shipped())})") from e
