"""The bench's suites of prompts: the built-in ones by name, or a suite file, and the subsets
``--quick`` and ``--prompts`` run."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

QUICK_PROMPTS = ("code-intervals", "edit-refactor", "explain-gil")
QUICK_MAX_TOKENS = 48
SUITE_MAX_TOKENS = 200  # a suite that names no reply length

# The built-in suites, by name. "heldout" holds prompts nothing is tuned on: it checks that a
# claim made on the default suite holds on prompts it was not made on.
BUILTIN_SUITES = ("default", "heldout")
# Built-in suites of long prompts, held out like "heldout": each prompt is a document of 600 to
# 2,000 tokens with a question on it ("documents") or an instruction to summarize it
# ("summaries"), so a reply's cost is mostly its prefill and its text copies from a long context.
# They are apart from BUILTIN_SUITES because they have no edit prompts and no recorded verdicts.
LONG_SUITES = ("documents", "summaries")


def load_suite(name_or_path: str = "default") -> dict:
    """A built-in suite by name, or a suite file: ``{"prompts": [{"id", "category", "prompt"}, ...]}``
    with an optional ``name`` and ``max_tokens``."""
    if name_or_path in BUILTIN_SUITES + LONG_SUITES:
        text = resources.files("localspec.bench").joinpath(f"suites/{name_or_path}.json").read_text("utf-8")
        return json.loads(text)
    path = Path(name_or_path)
    try:
        suite = json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read the suite ({e})") from e
    if not isinstance(suite.get("prompts"), list) or not all("prompt" in p for p in suite["prompts"]):
        raise ValueError(f'{path}: a suite is {{"prompts": [{{"id", "category", "prompt"}}, ...]}}')
    for i, p in enumerate(suite["prompts"]):
        p.setdefault("id", f"prompt-{i + 1}")
        p.setdefault("category", "custom")
    return suite


def only(suite: dict, ids: str | None, items: str = "prompts") -> dict:
    """The suite with only the prompts (a repeated-work suite's ``scenarios``) whose ids ``ids``
    lists (comma-separated; none: all of them); ValueError naming any not in it."""
    if not ids:
        return suite
    wanted = ids.split(",")
    known = [p["id"] for p in suite[items]]
    if missing := [i for i in wanted if i not in known]:
        raise ValueError(f"no {items[:-1]} {', '.join(missing)} in this suite (known: {', '.join(known)})")
    return {**suite, items: [p for p in suite[items] if p["id"] in wanted]}


def quick(suite: dict) -> dict:
    prompts = [p for p in suite["prompts"] if p["id"] in QUICK_PROMPTS] or suite["prompts"][:3]
    return {**suite, "prompts": prompts, "max_tokens": QUICK_MAX_TOKENS}
