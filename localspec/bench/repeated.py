"""Repeated work: scenarios played in order, as people repeat themselves (a regenerated reply,
a function refined over five turns, a loop of requests in one format, a file edited again and
again), each mode with a history of its own that starts empty.

Modes are the session's ("none", "draft", "lookup", ...), and "MODE+history": the same mode
drafting from the replies its own earlier requests of the scenario gave. Requests run
interleaved by request (A, B, C for request 1, then for request 2, ...), with the order turned
round on every repetition, so a noisy machine slows every mode alike, after a short warm-up
reply in each mode (the first reply of a process also pages the weights in). Every reply starts
from empty caches, as in the rest of the bench. A chat scenario's turns carry each mode's own
earlier replies; at temperature 0 those are the target's own, the same for every mode.

Returns data; the CLI prints (``markdown``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

from ..chat.history import HistoryStore
from ..chat.replies import PastReplies, tokenizer_key
from ..core.sampling import SamplingParams
from ..core.stats import RunStats

HISTORY = "+history"
KINDS = ("regenerate", "chat", "requests")
# the built-in suites: "repeated-heldout" holds scenarios of every kind nothing was tuned on, to check a claim
BUILTIN = ("repeated", "repeated-heldout")


def load(name_or_path: str = "repeated") -> dict:
    """A built-in suite by name (``BUILTIN``), or a file: ``{"scenarios": [{"id", "kind", ...}, ...]}`` with
    kind "regenerate" (``prompt``, ``times``), "chat" (``turns``) or "requests" (``template``
    with ``{input}``, ``inputs``, an optional ``system``); ValueError naming what is wrong."""
    if name_or_path in BUILTIN:
        text = resources.files("localspec.bench").joinpath(f"suites/{name_or_path}.json").read_text("utf-8")
        return json.loads(text)
    try:
        suite = json.loads(Path(name_or_path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{name_or_path}: cannot read the scenarios ({e})") from e
    scenarios = suite.get("scenarios") if isinstance(suite, dict) else None
    if not isinstance(scenarios, list) or not scenarios:
        raise ValueError(f'{name_or_path}: a repeated-work suite is {{"scenarios": [{{"id", "kind", ...}}, ...]}}')
    for i, sc in enumerate(scenarios):
        need = {"regenerate": ("prompt",), "chat": ("turns",), "requests": ("template", "inputs")}.get(sc.get("kind"))
        if need is None or any(k not in sc for k in need):
            raise ValueError(f"{name_or_path}: scenario {i + 1} needs a kind in {KINDS} and its fields")
        sc.setdefault("id", f"scenario-{i + 1}")
    return suite


def with_max_tokens(suite: dict, max_tokens: int | None) -> dict:
    """The suite with ``max_tokens`` as the reply length of each scenario that sets none (else 200)."""
    if not max_tokens:
        return suite
    return {**suite, "scenarios": [{"max_tokens": max_tokens, **s} for s in suite["scenarios"]]}


def requests(scenario: dict) -> int:
    """How many replies the scenario asks for."""
    kind = scenario["kind"]
    if kind == "regenerate":
        return int(scenario.get("times", 2))
    return len(scenario["turns"] if kind == "chat" else scenario["inputs"])


def messages(scenario: dict, i: int, earlier: Sequence[str]) -> list[dict]:
    """The ``i``-th request; ``earlier``: this mode's replies so far (a chat carries them)."""
    kind = scenario["kind"]
    if kind == "regenerate":
        return [{"role": "user", "content": scenario["prompt"]}]
    if kind == "chat":
        msgs: list[dict] = []
        for turn, reply in zip(scenario["turns"][:i], earlier):
            msgs += [{"role": "user", "content": turn}, {"role": "assistant", "content": reply}]
        return msgs + [{"role": "user", "content": scenario["turns"][i]}]
    system = [{"role": "system", "content": scenario["system"]}] if scenario.get("system") else []
    return system + [{"role": "user", "content": scenario["template"].replace("{input}", scenario["inputs"][i])}]


def run_repeated(
    session,
    suite: dict,
    modes: Sequence[str],
    temperature: float = 0.0,
    repeats: int = 1,
    seed: int = 1234,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict:
    """Every scenario in every mode, ``repeats`` times; one row per scenario, mode and repetition."""
    say = progress or (lambda *_: None)
    scenarios = suite["scenarios"]
    total, done = sum(requests(s) for s in scenarios) * len(modes) * repeats, 0
    rows = []
    for mode in dict.fromkeys(m.removesuffix(HISTORY) for m in modes):  # page the weights in, warm the caches
        session.replies = None
        session.reset()
        for _ in session.chat([{"role": "user", "content": "Say hello."}], SamplingParams(), 8, mode=mode):
            pass
    with tempfile.TemporaryDirectory(prefix="localspec-repeated-") as tmp:
        for rep in range(repeats):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for scenario in scenarios:
                folder = Path(tmp) / f"{rep}-{scenario['id']}"
                played = _play(session, scenario, order, folder, temperature, seed, say, done, total)
                done += requests(scenario) * len(modes)
                rows += [{"scenario": scenario["id"], "kind": scenario["kind"], "repeat": rep, **r} for r in played]
    head = {"suite": suite.get("name", "custom"), "modes": list(modes), "temperature": temperature, "repeats": repeats}
    return {**head, "rows": rows, "summary": summary(rows, modes)}


def _play(session, scenario, order, folder: Path, temperature, seed, say, done, total) -> list[dict]:
    n = requests(scenario)
    max_tokens = int(scenario.get("max_tokens", 200))
    histories = {m: _history(session, folder / m.replace("+", "-")) if m.endswith(HISTORY) else None for m in order}
    stats = {m: RunStats() for m in order}
    each: dict[str, list[float]] = {m: [] for m in order}  # each reply's tok/s
    replies: dict[str, list[str]] = {m: [] for m in order}
    tokens: dict[str, list[list[int]]] = {m: [] for m in order}
    for i in range(n):
        for mode in order:
            say(done, total, f"{scenario['id']} {i + 1}/{n} {mode}")
            done += 1
            session.replies = histories[mode]
            session.reset()  # every reply starts from empty caches
            params = SamplingParams(temperature=temperature, seed=seed + i)
            msgs = messages(scenario, i, replies[mode])
            text, got, one = [], [], RunStats()
            base_mode = mode.removesuffix(HISTORY)
            for step in session.chat(msgs, params, max_tokens, mode=base_mode, repeatable=False):
                stats[mode].add(step)
                one.add(step)
                text.append(step.text)
                got += step.emitted
            each[mode].append(round(one.tokens_per_second, 3))
            replies[mode].append("".join(text))
            tokens[mode].append(got)
    session.replies = None
    ref = tokens.get("none")
    out = []
    for mode in order:
        row = {"mode": mode, "stats": stats[mode].as_dict(), "identical": None, "replies": n, "each_tps": each[mode]}
        if ref is not None and temperature == 0 and mode != "none":
            row["identical"] = sum(a == b for a, b in zip(tokens[mode], ref))
            row["parted"], row["carried"] = _partings(session, scenario, tokens[mode], ref, replies["none"])
        out.append(row)
    return out


def _partings(session, scenario: dict, got: list[list[int]], ref: list[list[int]], ref_texts: list[str]):
    """Where a mode's greedy replies part from the target alone's: each reply's index, token
    and the target alone's top-2 logit gap there (``Session.divergence``: a near-tie is the
    batched kernels' numerics); and how many replies followed a parted turn of a chat, which
    answer another conversation and are not compared."""
    parted, carried = [], 0
    for i, (mine, theirs) in enumerate(zip(got, ref)):
        if scenario["kind"] == "chat" and got[:i] != ref[:i]:
            carried += mine != theirs
        elif mine != theirs:
            where = session.divergence(messages(scenario, i, ref_texts), theirs, mine)
            parted.append({"reply": i + 1, **where})
    return parted, carried


def _history(session, folder: Path) -> PastReplies:
    """An empty history of the session's tokenizer, kept in ``folder``."""
    return PastReplies(HistoryStore(folder), tokenizer_key(session.target))


def summary(rows: list[dict], modes: Sequence[str]) -> dict:
    """Per mode: the median over scenarios and repetitions of its decode speed over the target
    alone's in the same scenario and repetition (and over each other mode's)."""
    by = {(r["scenario"], r["repeat"], r["mode"]): r["stats"] for r in rows}
    out: dict[str, dict] = {}
    for mode in modes:
        ratios: dict[str, list[float]] = {}
        for (scenario, rep, m), s in by.items():
            if m != mode:
                continue
            for other in modes:
                o = by.get((scenario, rep, other))
                if other != mode and o and o["tokens_per_second"] and s["tokens_per_second"]:
                    ratios.setdefault(other, []).append(s["tokens_per_second"] / o["tokens_per_second"])
        out[mode] = {f"vs {o}": round(statistics.median(v), 3) for o, v in ratios.items()}
    return out


def markdown(rep: dict) -> str:
    """The report as a table: per scenario, each mode's tok/s and speed-up over the target alone
    (medians over repetitions), where a history mode's accepted drafts came from (else the last
    mode's), and how many
    replies were the target alone's token for token (greedy)."""
    modes = rep["modes"]
    others = [m for m in modes if m != "none"]
    head = ["scenario", *(f"{m} tok/s" for m in modes), *(f"{m} ×" for m in others), "accepted from", "identical"]
    lines = [
        f"Repeated work ({rep['suite']}), temperature {rep['temperature']}, {rep['repeats']} repetition(s)",
        "",
        "| " + " | ".join(head) + " |",
        "|---" * len(head) + "|",
    ]
    for scenario in dict.fromkeys(r["scenario"] for r in rep["rows"]):
        rows = [r for r in rep["rows"] if r["scenario"] == scenario]
        speeds = [f"{_median(_tps(rows, m)):.1f}" for m in modes]
        ratios = [_ratio_text(rows, m) for m in others]
        lines.append(
            "| " + " | ".join([scenario, *speeds, *ratios, _sources(rows, modes[-1]), _identical(rows)]) + " |"
        )
    medians = "; ".join(f"{m} " + ", ".join(f"{k} {v:.2f}×" for k, v in rep["summary"][m].items()) for m in others)
    return "\n".join(lines + ["", f"Median over scenarios and repetitions: {medians}"])


def _tps(rows: list[dict], mode: str) -> list[float]:
    return [r["stats"]["tokens_per_second"] or 0.0 for r in rows if r["mode"] == mode]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _ratio_text(rows: list[dict], mode: str) -> str:
    alone = {r["repeat"]: r["stats"]["tokens_per_second"] for r in rows if r["mode"] == "none"}
    pairs = [
        r["stats"]["tokens_per_second"] / alone[r["repeat"]]
        for r in rows
        if r["mode"] == mode and alone.get(r["repeat"]) and r["stats"]["tokens_per_second"]
    ]
    return f"{statistics.median(pairs):.2f}×" if pairs else "–"


def _sources(rows: list[dict], mode: str) -> str:
    kept: dict[str, int] = {}
    for r in rows:
        if r["mode"] == mode:
            for source, n in r["stats"].get("accepted_by_source", {}).items():
                kept[source] = kept.get(source, 0) + n
    return " · ".join(f"{s} {n}" for s, n in sorted(kept.items(), key=lambda x: -x[1]) if n) or "–"


def _identical(rows: list[dict]) -> str:
    """The identical column: same replies / replies, then how many parted (at what largest
    top-2 gap) and how many followed a parted turn of a chat."""
    checked = [r for r in rows if r["identical"] is not None and r["mode"] != "none"]
    if not checked:
        return "–"
    text = f"{sum(r['identical'] for r in checked)}/{sum(r['replies'] for r in checked)}"
    parted = [p for r in checked for p in r.get("parted", ())]
    gaps = [p["gap"] for p in parted if p["gap"] is not None]
    carried = sum(r.get("carried", 0) for r in checked)
    notes = [f"{len(parted)} parted" + (f" at top-2 gaps ≤ {max(gaps):.3f}" if gaps else "")] if parted else []
    notes += [f"{carried} after a parted turn"] if carried else []
    return text + (f" ({'; '.join(notes)})" if notes else "")
