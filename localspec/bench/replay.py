"""``localspec bench --record`` and ``--replay``: the suite's greedy replies replayed to compare
drafting policies without timing noise.

``record`` loads the pair, measures the target's verify curve directly
(``measure.measure_costs``) and keeps, per prompt of the suite (default: the default one), the
prompt's tokens and the target's greedy reply.

``replay`` runs the real engine, controller and drafters on them: the target is the recorded
reply (greedy: a verify keeps exactly the draft tokens that agree with it), the draft is the
real draft model (its rows memoised next to the recording, in ``REC.json.memo``, so a second
replay runs in seconds), and every evaluation advances a virtual clock by the measured T(n) or
draft pass, times a lognormal factor of ``noise`` sigma (and ``burst``'s factor in a busy
stretch of each reply). With noise the costs are calibrated at load as a session does (sizes 1,
2, 3, 4, 6, 8, three samples each, and the longest verify one) and learnt online; without, the
controller is given the measured curve. Every mode's state carries over the prompts in order, as in the bench; with
``cold`` none does (every reply a fresh load, as ``localspec run`` starts), but each starts from
the acceptance the earlier replies counted, as a profile would hold (``no_profile``: from the
default prior, a machine's very first runs). It gives, per prompt, tokens/s over the target
alone, mean draft length and acceptance per policy; ``trace`` gives one prompt's steps, with the
drafting line wherever it changes. ``shape`` and ``draft_pass`` replay on another machine's
costs: T(n)/T(1) for n = 2, 3, ... and a draft pass in T(1), as docs/benchmarks.md gives them
per machine (the recording's T(1) stays), so a change can be checked against a steep curve on a
machine whose own is flat. ``keep_replies`` keeps each policy's replies as a history for the
prompts after them (suffix drafts from past replies); ``regenerate`` replays each prompt twice in
a row, the second a regenerate.

Timings are modelled, not measured: a replay compares policies; the bench measures them.
"""

from __future__ import annotations

import fnmatch
import json
import math
import pickle
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..chat.history import DEFAULT_CAP_TOKENS
from ..chat.replies import LEAD_IN
from ..chat.session import CALIBRATION_SIZES, LONGEST_VERIFY
from ..core import calibration
from ..core import costs as costs_module
from ..core.calibration import CALIBRATION_PREFIX
from ..core.costs import CostModel, DraftCost, VerifyCurve
from ..core.estimates import prior_from
from ..core.explain import explain
from ..core.modes import Drafting, ModeContext, ReplySpec, draft_model, target_alone
from ..core.options import DEFAULT_DRAFT_MAX
from ..core.policy import Policy
from ..core.protocol import CachedModel, common_prefix
from ..core.sampling import SamplingParams
from ..core.stats import RunStats
from ..core.suffix import Corpus, prompt_hash, with_reply
from . import measure, modes

if TYPE_CHECKING:
    from ..llama.backend import LlamaModel

TOP = 8  # draft logits kept per memoised row: the top token and its probability are exact
REPLY_TOKENS = 96  # the reply length recorded and replayed unless --max-tokens says otherwise
CURVE_SIZES = range(1, LONGEST_VERIFY + 1)  # T(n) recorded: to a copy's longest verify
# The draft model's load for a replay: its rows are memoised, so only a row the memo lacks runs
# it; a fixed, small load keeps those rows the same from one replay to the next.
DRAFT_CTX, DRAFT_THREADS = 4096, 2


class Clock:
    """Virtual seconds: each evaluation adds its cost, times a lognormal factor of ``sigma`` and,
    during a ``burst`` (start, length, factor: target evaluations ``start`` to ``start + length``
    of each reply), ``factor``: a stretch where the machine is busy. Work ``owe``d starts once the
    clock is next read: what follows a verify, outside any time the cost model is given."""

    def __init__(self, sigma: float, seed: int, burst: tuple[int, int, float] | None = None) -> None:
        self.now, self.sigma, self.rng = 0.0, sigma, np.random.default_rng(seed)
        self.burst, self.evals = burst, 0  # target evaluations so far in this reply
        self.owed = 0.0

    def __call__(self) -> float:
        now, self.now, self.owed = self.now, self.now + self.owed, 0.0
        return now

    def owe(self, seconds: float) -> None:
        self.owed += seconds

    def work(self, seconds: float) -> None:
        self.now += seconds * (math.exp(self.rng.normal(0.0, self.sigma)) if self.sigma else 1.0) * self.slowdown()

    def slowdown(self) -> float:
        if not self.burst:
            return 1.0
        start, length, factor = self.burst
        return factor if start <= self.evals < start + length else 1.0


class ReplayTarget(CachedModel):
    """Row j predicts the recorded token at j + 1 while the context is the recorded one."""

    def __init__(
        self, vocab: CachedModel, curve: dict[int, float], clock: Clock, blind: float = 0.0, size_change: float = 0.0
    ) -> None:
        super().__init__()
        self.vocab, self.curve, self.clock = vocab, curve, clock
        self.n_vocab, self.n_ctx = vocab.n_vocab, vocab.n_ctx
        self.blind = blind  # T(1)s of work after a verify per row past the first (ReplayOptions.blind)
        self.size_change = size_change  # T(1)s an evaluation of another size than the last costs more
        if size_change:  # ... and, as on a GPU, no sample until it settles
            from ..llama.backend import GPU_SETTLE

            self.settle = GPU_SETTLE
        self.true: list[int] = []

    def _decode(self, tokens, start, n_logits):
        self.clock.evals += 1
        self.clock.work(cost(self.curve, len(tokens)))
        if self.size_change and self.last_size not in (0, len(tokens)):
            self.clock.work(self.size_change * cost(self.curve, 1))
        if self.blind and n_logits > 1:
            self.clock.owe(self.blind * cost(self.curve, 1) * (n_logits - 1))
        ctx = self.cached[:start] + list(tokens)
        agree = common_prefix(ctx, self.true)
        rows = []
        for j in range(len(ctx) - n_logits, len(ctx)):
            row = np.zeros(self.n_vocab, np.float32)
            row[self.true[j + 1] if agree >= j + 1 and j + 1 < len(self.true) else 0] = 10.0
            rows.append(row)
        return rows

    def _remove(self, start: int) -> None:
        pass

    def tokenize(self, text, *, add_bos=True, special=True):
        return self.vocab.tokenize(text, add_bos=add_bos, special=special)

    def token_bytes(self, token):
        return self.vocab.token_bytes(token)

    def is_eog(self, token):
        return self.vocab.is_eog(token)


def memo_key(context) -> int:
    """Where the memo keeps the draft's row after ``context`` (the tokens so far)."""
    return hash(tuple(context))


class MemoDraft(ReplayTarget):
    """The real draft model, each row memoised by its context (top TOP logits and the
    log-sum-exp, the rest of the mass spread evenly), timed as a pass or as reading."""

    def __init__(self, real: CachedModel, t_draft: float, read: float, clock: Clock, memo: dict) -> None:
        super().__init__(real, {}, clock)
        self.t_draft, self.read, self.memo = t_draft, read, memo

    def _decode(self, tokens, start, n_logits):
        n = len(tokens)
        self.clock.work(self.t_draft if n <= 2 else self.read * n)
        ctx = self.cached[:start] + list(tokens)
        keys = [memo_key(ctx[: j + 1]) for j in range(len(ctx) - n_logits, len(ctx))]
        if not all(k in self.memo for k in keys):
            for key, row in zip(keys, self.vocab.sync(ctx, n_logits=n_logits) or []):
                self.memo[key] = kept_row(row)
        rows = []
        for key in keys:
            ids, logits, lse = self.memo[key]
            rest = max(1.0 - float(np.exp(logits.astype(np.float64) - lse).sum()), 1e-12)
            row = np.full(self.n_vocab, lse + math.log(rest / (self.n_vocab - TOP)), np.float32)
            row[ids] = logits
            rows.append(row)
        return rows


def kept_row(row) -> tuple:
    """What the memo keeps of a draft row: the top TOP ids, their logits and the log-sum-exp."""
    r = np.asarray(row, np.float64)
    top = np.argpartition(r, -TOP)[-TOP:]
    return top, r[top].astype(np.float32), r.max() + math.log(np.exp(r - r.max()).sum())


# --- recording ------------------------------------------------------------------------------------


def record(
    session, prompts: list[dict], max_tokens: int, on_prompt: Callable[[str, int, int], None] | None = None
) -> dict:
    """The recording of ``prompts`` (a suite's) on a loaded pair: the target's measured curve,
    its draft pass and reading cost, and per prompt its tokens and the target's greedy reply of
    up to ``max_tokens``. ``on_prompt(id, prompt tokens, reply tokens)`` after each."""
    direct = measure.measure_costs(session)
    out: dict = {
        "curve": {n: direct.T(n) for n in CURVE_SIZES},
        "t_draft": direct.t_draft,
        "read": session.costs.read(100) / 100,
        "prompts": [],
    }
    for prompt in prompts:
        session.reset()
        messages = [{"role": "user", "content": prompt["prompt"]}]
        ids = session.fit(messages, max_tokens)[0]
        reply: list[int] = []
        for step in session.chat(messages, SamplingParams(), max_tokens, mode="none", repeatable=False):
            reply.extend(step.drafted[: step.n_accepted])
            reply.extend([step.token] if step.token >= 0 else [])
        out["prompts"].append({"id": prompt["id"], "prompt": ids, "reply": reply})
        if on_prompt:
            on_prompt(prompt["id"], len(ids), len(reply))
    return out


def memo_path(recording: Path) -> Path:
    """The draft's memoised rows beside a recording: ``REC.json.memo``."""
    return Path(f"{recording}.memo")


def read_recording(path: Path) -> tuple[dict, dict]:
    """A recording and its memo (empty where none was written yet); ValueError saying why where
    they cannot be read or the file is not a recording."""
    memo = memo_path(path)
    try:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = pickle.loads(memo.read_bytes()) if memo.exists() else {}
    except (OSError, ValueError, EOFError, pickle.UnpicklingError) as e:
        raise ValueError(f"cannot read a recording and its memo there ({e})") from None
    if not isinstance(rec, dict) or not {"curve", "t_draft", "read", "prompts"} <= set(rec):
        raise ValueError("not a recording of `localspec bench --record`")
    return rec, rows


def write_memo(path: Path, memo: dict) -> None:
    memo_path(path).write_bytes(pickle.dumps(memo))


def memo_note(computed: int, path: Path) -> str | None:
    """What to say when a replay computed ``computed`` draft rows (a row's logits shift slightly
    with the batch it was computed in, so only replays that compute none compare exactly)."""
    if not computed:
        return None
    return (
        f"note: {computed} draft rows were computed now (kept in {memo_path(path)}): compare replays that "
        "compute none (run it again; one replay of a recording at a time, or each writes over the other's memo)"
    )


def load_draft(path: Path) -> LlamaModel:
    """The real draft model a replay reads its rows from (see DRAFT_CTX)."""
    from ..llama import backend as llama_backend

    return llama_backend.LlamaModel.load(Path(path), DRAFT_CTX, DRAFT_THREADS, 0)


# --- replaying ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayOptions:
    """How a recording is replayed: the options of ``localspec bench --replay``."""

    policies: tuple[str, ...] = ("none", "auto")
    """The policies compared: none (the target alone), auto, or fixed-kK-pP."""
    prompts: str = ""
    """The prompts replayed: comma-separated shell-style patterns of ids (empty: all)."""
    noise: float = 0.0
    """The sigma of each evaluation's lognormal factor; above 0 the costs are also calibrated."""
    seed: int = 0
    """The noise's seed."""
    burst: tuple[int, int, float] | None = None
    """START, LENGTH, FACTOR: target evaluations START to START + LENGTH of each reply slower."""
    cold: bool = False
    """A fresh controller for every prompt, its prior what the earlier prompts counted."""
    no_profile: bool = False
    """With ``cold``: every prompt from the default prior."""
    shape: tuple[float, ...] = ()
    """Another machine's T(n)/T(1) for n = 2, 3, ... (empty: the recording's curve)."""
    draft_pass: float | None = None
    """With ``shape``: a draft pass in T(1) (None: the recording's own)."""
    draft_read: float | None = None
    """A prompt token's read by the draft in T(1) (None: the recording's own, its machine's):
    what a reply's first draft pays to catch up on the prompt (``core.reading``)."""
    policy: Policy = field(default_factory=Policy)
    """The drafting Policy every mode runs with (``--set`` changes its fields)."""
    trace: str = ""
    """The id of a prompt whose steps are traced."""
    max_tokens: int = REPLY_TOKENS
    """The reply tokens replayed of each recording."""
    keep_replies: bool = False
    """Each policy keeps its replies as a history (empty at the start), as a session does, so a
    later prompt's reply may copy from an earlier one's."""
    regenerate: bool = False
    """Each prompt replayed twice in a row, its replies kept: the second (``ID:regenerate``) is a
    regenerate."""
    copy: bool = True
    """Draft mode may copy suffix matches (``--no-copy``: never, what copies are worth)."""
    blind: float = 0.0
    """Each verify row past the first costs this many T(1) more, after the verify is timed: work
    the cost model is not given (Python on a verify's rows)."""
    size_change: float = 0.0
    """A target evaluation of another size than the one before costs this many T(1) more and is
    no sample until the size settles, as on a GPU (CUDA builds its graph again)."""


class Outcome(NamedTuple):
    """A policy's replay of one prompt."""

    tokens_per_second: float
    mean_draft_length: float
    acceptance: float
    wall_tokens_per_second: float = math.nan  # the whole request's: the prompt's read included


@dataclass
class Replay:
    """What a replay gives: per prompt id, per policy, its outcome; and the traced steps, one
    line each (``policy k=.. drafted=.. accepted=..``, then the drafting line where it changes)."""

    results: dict[str, dict[str, Outcome]] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)
    # per policy: how many tokens each verify dropped (0: all kept), which sizes the rollback a
    # hybrid target's snapshots must cover (``llama.memory.SNAPSHOTS``)
    dropped: dict[str, Counter[int]] = field(default_factory=dict)


def replay(recording: dict, real_draft: CachedModel, memo: dict, options: ReplayOptions) -> Replay:
    """``recording``'s prompts replayed with each of ``options.policies`` in turn, the draft's
    rows read from ``memo`` (the rows it lacks computed by ``real_draft`` and added). The
    virtual clock is installed as ``costs.clock`` while it runs."""
    clock = Clock(options.noise, options.seed, options.burst)
    curve, t_draft, read = replayed_costs(recording, options)
    target = ReplayTarget(real_draft, curve, clock, options.blind, options.size_change)
    draft = MemoDraft(real_draft, t_draft, read, clock, memo)
    prompts = select(recording["prompts"], options.prompts)
    out = Replay()
    real_clock, costs_module.clock = costs_module.clock, clock
    try:
        for policy in options.policies:
            run_policy(policy, prompts, target, draft, options, out)
    finally:
        costs_module.clock = real_clock
    return out


def replayed_costs(recording: dict, options: ReplayOptions) -> tuple[dict[int, float], float, float]:
    """The costs a replay runs on, in seconds: the verify curve T(n), a draft pass and the draft's
    read of a prompt token: the recording's, or another machine's (``--shape``, ``--draft-pass``,
    ``--draft-read``) at the recording's T(1)."""
    curve, t_draft = {int(n): t for n, t in recording["curve"].items()}, recording["t_draft"]
    if options.shape:
        curve, t_draft = reshape(curve, t_draft, list(options.shape), options.draft_pass)
    read = recording["read"] if options.draft_read is None else options.draft_read * curve[1]
    return curve, t_draft, read


def run_policy(
    policy: str, prompts: list[dict], target: ReplayTarget, draft: MemoDraft, options: ReplayOptions, out: Replay
) -> None:
    """Every prompt replayed with ``policy``, its outcomes and traced steps added to ``out``."""
    clock, curve, tunables = target.clock, target.curve, options.policy
    history = [Corpus()]  # the replies kept so far (a session keeps them on disk: a fresh load reads them too)
    kept = (lambda: history) if options.keep_replies or options.regenerate else None

    def mode_for(costs: CostModel, prior: float | None = None) -> Drafting:
        ctx = ModeContext(
            target,
            draft,
            costs,
            draft_max=DEFAULT_DRAFT_MAX,
            copy=options.copy,
            prior=prior,
            policy=tunables,
            history=kept,
        )
        return build(policy, ctx)

    mode = mode_for(costs_for(curve, draft, clock, target))
    counted = [0, 0]  # accepted tokens and rejections so far: what the profile would hold
    plays = [(p, again) for p in prompts for again in (False, True)[: 1 + options.regenerate]]
    for i, (p, again) in enumerate(plays):
        if options.cold:  # a fresh load for every reply, as `localspec run` starts
            prior = None if options.no_profile or not counted[1] else prior_from(counted[0], counted[1], tunables)
            mode = mode_for(costs_for(curve, draft, clock, target), prior)
        target.true, target.cached, draft.cached = p["prompt"] + p["reply"], [], []
        clock.evals = 0
        engine = mode.engine(target, ReplySpec(len(p["prompt"])))
        stats, reply = RunStats(), list[int]()
        line, name = "", p["id"] + (":regenerate" if again else "")
        for step in engine.generate(list(p["prompt"]), SamplingParams(), options.max_tokens):
            if options.trace == name:
                now = explain(mode.controller.state(), mode.controller.costs, reading=mode.controller.reading).line
                traced = f"{policy} k={step.model_k} drafted={len(step.drafted)} accepted={step.n_accepted}"
                traced += f" padded={step.n_padded}" if step.n_padded else ""
                traced += f" from={step.source}" if step.source else ""
                traced += f" time={(step.draft_seconds + step.verify_seconds) / cost(curve, 1):.2f}"
                out.trace.append(traced + (f"  {now}" if now != line else ""))
                line = now
            stats.add(step)
            reply.extend(step.emitted)
            if step.drafted:
                out.dropped.setdefault(policy, Counter())[len(step.drafted) - step.n_accepted] += 1
            counted[0] += step.n_accepted
            counted[1] += step.n_accepted < len(step.drafted)
        if kept is not None:
            answer = [*p["prompt"][-LEAD_IN:], *reply]
            history[0] = with_reply(history[0], answer, float(i), DEFAULT_CAP_TOKENS, prompt_hash(p["prompt"]))
        wall = stats.prefill_seconds + stats.decode_seconds
        wall_tps = stats.n_tokens / wall if wall > 0 else 0.0
        outcome = Outcome(stats.tokens_per_second, stats.mean_draft_length, stats.acceptance_rate or 0.0, wall_tps)
        out.results.setdefault(name, {})[policy] = outcome


def reshape(
    curve: dict[int, float], t_draft: float, shape: list[float], draft_pass: float | None
) -> tuple[dict[int, float], float]:
    """Another machine's costs at this recording's T(1): T(n) = T(1) * shape[n - 2] for n up to
    len(shape) + 1, then growing by the shape's last step; a draft pass of ``draft_pass`` T(1)
    (None: the recording's own)."""
    ratios = [1.0, *shape]
    step = ratios[-1] - ratios[-2] if len(ratios) > 1 else 0.0
    t1 = curve[1]
    out = {n: t1 * (ratios[n - 1] if n <= len(ratios) else ratios[-1] + step * (n - len(ratios))) for n in curve}
    return out, (draft_pass * t1 if draft_pass else t_draft)


def cost(curve: dict[int, float], n: int) -> float:
    """A verify of n tokens: the recorded T(n), past the recorded sizes T(top) * n / top."""
    top = max(curve)
    return curve[min(n, top)] * max(1.0, n / top)


def costs_for(curve: dict[int, float], draft: MemoDraft, clock: Clock, target: CachedModel) -> CostModel:
    """The costs a session would start from: the measured curve, the longest verify, the draft's
    pass and its reading of a prompt (``draft.read`` a token, as the load times it:
    ``calibration.time_read``), or with noise a calibration of the sizes a session calibrates at
    load (three samples each; the longest verify one); where the target pays for a change of
    size (``--size-change``), that change timed on it as a load times it
    (``calibration.time_change``)."""
    change, t_draft = calibration.time_change(target), draft.t_draft
    if not clock.sigma:
        verify, cost_draft = VerifyCurve({**curve, LONGEST_VERIFY: cost(curve, LONGEST_VERIFY)}), DraftCost(t_draft)
    else:
        verify, cost_draft = VerifyCurve(), DraftCost()
        for n in (*CALIBRATION_SIZES, LONGEST_VERIFY):
            for _ in range(1 if n == LONGEST_VERIFY else 3):
                verify.add(n, cost(curve, n) * math.exp(clock.rng.normal(0.0, clock.sigma)))
        for _ in range(3):
            cost_draft.observe(1, t_draft * math.exp(clock.rng.normal(0.0, clock.sigma)))
    # the load's read of the calibration prefix (without noise: the clock's draws stay as they were)
    cost_draft.observe_read(CALIBRATION_PREFIX, draft.read * CALIBRATION_PREFIX)
    verify.change = change
    return CostModel(verify, cost_draft)


def policy_problem(policy: str) -> str | None:
    """Why ``policy`` is not one a replay runs (None: it is)."""
    if policy in ("none", "auto") or modes.parse_fixed(policy):
        return None
    return f"unknown policy {policy!r}: none, auto or fixed-kK-pP"


def build(policy: str, ctx: ModeContext) -> Drafting:
    """The mode that runs ``policy`` (see ``policy_problem``; ValueError for another name)."""
    if policy == "none":
        return target_alone(ctx)
    if policy == "auto":
        return draft_model(ctx)
    fixed = modes.parse_fixed(policy)
    if fixed is None:
        raise ValueError(policy_problem(policy))
    return modes.FixedDraft(*fixed)(ctx)


def select(prompts: list[dict], include: str = "", skip: str = "") -> list[dict]:
    """The prompts whose id matches a pattern of ``include`` (comma-separated, shell-style, e.g.
    ``code-*,edit-*``; empty: all) and none of ``skip``."""

    def matches(prompt_id: str, patterns: str) -> bool:
        return any(fnmatch.fnmatchcase(prompt_id, pattern) for pattern in patterns.split(",") if pattern)

    return [p for p in prompts if (not include or matches(p["id"], include)) and not matches(p["id"], skip)]


def policy_from(assignments: list[str]) -> Policy:
    """The default Policy with each ``NAME=VALUE`` applied; ValueError for an unknown name or a
    value of the wrong kind, listing the known names."""
    policy = Policy()
    for assignment in assignments:
        policy = policy.with_setting(assignment)
    return policy


def parse_burst(text: str) -> tuple[int, int, float]:
    """``START,LENGTH,FACTOR``: two whole numbers of target evaluations and a slowdown; ValueError
    saying what it wants otherwise."""
    problem = ValueError(
        f"{text!r}: give START,LENGTH,FACTOR: the first target evaluation of the busy stretch (0 or more), "
        "how many it spans (1 or more) and how much slower they run (a number above 0), e.g. 8,12,1.6"
    )
    parts = text.split(",")
    if len(parts) != 3:
        raise problem
    try:
        start, length, factor = int(parts[0]), int(parts[1]), float(parts[2])
    except ValueError:
        raise problem from None
    if start < 0 or length < 1 or not factor > 0:
        raise problem
    return start, length, factor


# --- the report -----------------------------------------------------------------------------------


def report(results: dict[str, dict[str, Outcome]], policies: list[str]) -> list[str]:
    """The report's lines: per prompt each policy's speed-up over the target alone ('none'; its
    tokens/s where 'none' was not replayed), draft length and acceptance; the medians; and with
    'auto' and a fixed policy, auto over the best fixed one per prompt."""
    lines = ["prompt".ljust(18) + "".join(p.rjust(20) for p in policies) + "   (speed-up, draft length, acceptance)"]
    ratios: dict[str, list[float]] = {p: [] for p in policies}
    for pid, row in results.items():
        base = row["none"][0] if "none" in row else 1.0
        cells = []
        for p in policies:
            tps, length, alpha = row[p][:3]
            ratios[p].append(tps / base)
            cells.append(f"{tps / base:6.2f} {length:5.1f} {alpha:4.2f}".rjust(20))
        lines.append(pid.ljust(18) + "".join(cells))
    lines.append("median".ljust(18) + "".join(f"{statistics.median(ratios[p]):6.2f}".rjust(20) for p in policies))
    lines += wall_report(results, policies)
    fixed = [p for p in policies if modes.parse_fixed(p)]
    if "auto" in policies and fixed:
        best = [row["auto"][0] / max(row[p][0] for p in fixed) for row in results.values()]
        lines.append("auto / best fixed: " + " ".join(f"{x:.2f}" for x in best) + f"  (min {min(best):.2f})")
    return lines


def costs_report(recording: dict, options: ReplayOptions) -> list[str]:
    """The costs replayed, in T(1), and where each comes from (the recording's machine, or a flag):
    every figure of the table rests on them."""
    curve, t_draft, read = replayed_costs(recording, options)
    t1, sizes = curve[1], (2, 4, 8, 16)
    ratios = " / ".join(f"{cost(curve, n) / t1:.2f}" for n in sizes)
    mine = "this recording's machine"
    change = options.size_change
    return [
        f"costs replayed, in T(1): T(n), n = {' / '.join(map(str, sizes))}: {ratios} "
        f"({'--shape' if options.shape else mine}); a draft pass {t_draft / t1:.2f} "
        f"({'--draft-pass' if options.shape and options.draft_pass else mine}); the draft's read of a prompt "
        f"token {read / t1:.3f} ({mine if options.draft_read is None else '--draft-read'}); "
        + (
            f"a change of batch size {change:.2f} each way, into a size and out of it (--size-change)"
            if change
            else "a change of batch size nothing (a CPU's; --size-change for a GPU's)"
        )
    ]


def wall_report(results: dict[str, dict[str, Outcome]], policies: list[str]) -> list[str]:
    """Each policy's whole requests over the target alone's, the prompt's read included (the
    draft's reading of it falls in the prefill or in a step, as the engine puts it): median and
    worst prompt ([] where 'none' was not replayed)."""
    if not all("none" in row for row in results.values()):
        return []
    cells = []
    for p in policies:
        ratios = [row[p].wall_tokens_per_second / row["none"].wall_tokens_per_second for row in results.values()]
        cells.append(f"{statistics.median(ratios):.2f} (worst {min(ratios):.2f})".rjust(20))
    return ["whole request".ljust(18) + "".join(cells)]


def dropped_report(dropped: dict[str, Counter[int]], beyond: Sequence[int] = (3, 4, 8, 12, 16)) -> list[str]:
    """Per policy the share of its verifies that dropped more than n tokens, for each n: those a
    hybrid target with n snapshots rolls back from a checkpoint."""
    lines = []
    for policy, counts in dropped.items():
        n = sum(counts.values())
        shares = " / ".join(f"{sum(c for d, c in counts.items() if d > b) / n:.1%}" for b in beyond)
        lines.append(f"{policy}: of {n} verifies, dropping more than {' / '.join(map(str, beyond))} tokens: {shares}")
    return lines
