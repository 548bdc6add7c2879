"""Replay the suite's greedy replies to compare drafting policies without timing noise.

    .venv/bin/python scripts/replay_policy.py record --target models/qwen2.5-coder-1.5b-f16.gguf \\
        --draft models/qwen2.5-coder-0.5b.gguf --out f16.json [--max-tokens 96] [--suite heldout]
    .venv/bin/python scripts/replay_policy.py replay f16.json --draft models/qwen2.5-coder-0.5b.gguf \\
        [--policies none,auto,fixed-k8-p0.75] [--noise 0.05 --seed 1] [--prompts a,b] [--trace PROMPT] \\
        [--cold [--no-profile]] [--set opening_steps=0] [--shape 1.58,1.75,1.88 --draft-pass 0.27] \\
        [--burst 8,12,1.6]
    .venv/bin/python scripts/replay_policy.py runs f16.json [held.json ...] [--prompts 'code-*,edit-*'] [--skip ID]
    .venv/bin/python scripts/replay_policy.py tree f16.json [held.json ...] [--k 4] [--unsure 0.6] [--batched 0.1] \
        [--shape 1.02,1.04 --draft-pass 0.1]

``record`` loads the pair, measures the target's verify curve directly (bench.measure.measure_costs)
and keeps, per prompt of the suite (default: the default one), the prompt's tokens and the target's greedy reply.
``replay`` runs the real engine, controller and drafters on them: the target is the recorded
reply (greedy: a verify keeps exactly the draft tokens that agree with it), the draft is the
real draft model (its rows memoised next to the recording, so a second replay runs in
seconds), and every evaluation advances a virtual clock by the measured T(n) or draft pass,
times a lognormal factor of ``--noise`` sigma (and ``--burst``'s factor in a busy stretch of each
reply). With noise the costs are calibrated at load as
a session does (sizes 1, 2, 3, 4, 6, 8, three samples each) and learnt online; without, the
controller is given the measured curve. Every mode's state carries over the prompts in order,
as in the bench; with ``--cold`` none does (every reply a fresh load, as ``localspec run``
starts), but each starts from the acceptance the earlier replies counted, as a profile would
hold (``--no-profile``: from the default prior, a machine's very first runs). It prints, per
prompt, tokens/s over the target alone, mean draft length and acceptance per policy.
``--trace PROMPT`` prints that prompt's steps, with the drafting line wherever it changes.
``--shape`` and ``--draft-pass`` replay on another machine's costs: T(n)/T(1) for n = 2, 3, ...
and a draft pass in T(1), as docs/benchmarks.md gives them per machine (the recording's T(1)
stays), so a change can be checked against a steep curve on a machine whose own is flat.
Timings are modelled, not measured: it compares policies; the bench measures them.
``runs`` reads recordings already replayed (their memo) and prints how many of four blindly
drafted tokens are accepted, by the first one's confidence, beside what the marginal rule's
look-ahead expects (``first_token_runs``), and where the draft is unsure how often the reply's
token is its first or its second choice (``unsure_choices``), over the prompts ``--prompts`` picks
and ``--skip`` leaves (shell-style patterns of prompt ids): a kind of text at a time.
``tree`` prices, on the recording's costs (or ``--shape``'s), k blind drafts a step as one linear
draft and as a two-branch tree: the draft's first and second choice at the first token under
``--unsure`` sure, each continued to depth k and verified in one batch (``scripts/tree_verify.py``
measures that a tree costs what a linear verify of its size does); ``--batched``: what a pass of
the second branch costs, in passes (1: run alone; about 0.1 where the draft runs both branches in
one batch). It tells whether a tree drafter could pay on a machine before one is built.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import pickle
import statistics
import sys
from pathlib import Path
from typing import cast

import numpy as np

from localspec.bench import measure, modes, suites
from localspec.chat.session import CALIBRATION_SIZES, LoadOptions, PairSpec, Session
from localspec.core import costs as costs_module
from localspec.core.costs import CostModel, DraftCost, VerifyCurve
from localspec.core.estimates import prior_from
from localspec.core.explain import explain
from localspec.core.modes import ModeContext, ReplySpec, draft_model, target_alone
from localspec.core.policy import Policy
from localspec.core.protocol import CachedModel, common_prefix
from localspec.core.sampling import SamplingParams
from localspec.core.stats import RunStats

TOP = 8  # draft logits kept per memoised row: the top token and its probability are exact


class Clock:
    """Virtual seconds: each evaluation adds its cost, times a lognormal factor of ``sigma`` and,
    during a ``burst`` (start, length, factor: target evaluations ``start`` to ``start + length``
    of each reply), ``factor``: a stretch where the machine is busy."""

    def __init__(self, sigma: float, seed: int, burst: tuple[int, int, float] | None = None) -> None:
        self.now, self.sigma, self.rng = 0.0, sigma, np.random.default_rng(seed)
        self.burst, self.evals = burst, 0  # target evaluations so far in this reply

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float) -> None:
        self.now += seconds * (math.exp(self.rng.normal(0.0, self.sigma)) if self.sigma else 1.0) * self.slowdown()

    def slowdown(self) -> float:
        if not self.burst:
            return 1.0
        start, length, factor = self.burst
        return factor if start <= self.evals < start + length else 1.0


class ReplayTarget(CachedModel):
    """Row j predicts the recorded token at j + 1 while the context is the recorded one."""

    def __init__(self, vocab: CachedModel, curve: dict[int, float], clock: Clock) -> None:
        super().__init__()
        self.vocab, self.curve, self.clock = vocab, curve, clock
        self.n_vocab, self.n_ctx = vocab.n_vocab, vocab.n_ctx
        self.true: list[int] = []

    def _decode(self, tokens, start, n_logits):
        n = len(tokens)
        top = max(self.curve)
        self.clock.evals += 1
        self.clock.work(self.curve[min(n, top)] * max(1.0, n / top))
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


def record(args) -> None:
    session = Session.load(PairSpec(Path(args.target), Path(args.draft)), LoadOptions())
    direct = measure.measure_costs(session)
    out = {
        "curve": {n: direct.T(n) for n in range(1, 18)},
        "t_draft": direct.t_draft,
        "read": session.costs.read(100) / 100,
        "prompts": [],
    }
    for prompt in suites.load_suite(args.suite)["prompts"]:
        session.reset()
        messages = [{"role": "user", "content": prompt["prompt"]}]
        ids = session.fit(messages, args.max_tokens)[0]
        reply: list[int] = []
        for step in session.chat(messages, SamplingParams(), args.max_tokens, mode="none", repeatable=False):
            reply.extend(step.drafted[: step.n_accepted])
            reply.extend([step.token] if step.token >= 0 else [])
        out["prompts"].append({"id": prompt["id"], "prompt": ids, "reply": reply})
        print(prompt["id"], len(ids), len(reply), file=sys.stderr)
    Path(args.out).write_text(json.dumps(out))
    session.close()


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


def costs_for(curve: dict[int, float], t_draft: float, clock: Clock) -> CostModel:
    """The costs a session would start from: the measured curve, or with noise a calibration
    of the sizes a session calibrates at load (three samples each)."""
    if not clock.sigma:
        return CostModel(VerifyCurve(curve), DraftCost(t_draft))
    verify, draft = VerifyCurve(), DraftCost()
    for n in CALIBRATION_SIZES:
        for _ in range(3):
            verify.add(n, curve[n] * math.exp(clock.rng.normal(0.0, clock.sigma)))
    for _ in range(3):
        draft.observe(1, t_draft * math.exp(clock.rng.normal(0.0, clock.sigma)))
    return CostModel(verify, draft)


def build(policy: str, ctx: ModeContext):
    if policy == "none":
        return target_alone(ctx)
    if policy == "auto":
        return draft_model(ctx)
    fixed = modes.parse_fixed(policy)
    if fixed is None:
        raise SystemExit(f"unknown policy {policy!r}: none, auto or fixed-kK-pP")
    return modes.FixedDraft(*fixed)(ctx)


def replay(args) -> None:
    from localspec.llama import backend as llama_backend

    rec = json.loads(Path(args.recording).read_text())
    memo_path = Path(args.recording + ".memo")
    memo = pickle.loads(memo_path.read_bytes()) if memo_path.exists() else {}
    clock = Clock(args.noise, args.seed, args.burst)
    costs_module.clock = clock
    real = llama_backend.LlamaModel.load(Path(args.draft), 4096, 2, 0)
    curve, t_draft = {int(n): t for n, t in rec["curve"].items()}, rec["t_draft"]
    if args.shape:
        curve, t_draft = reshape(curve, t_draft, [float(x) for x in args.shape.split(",")], args.draft_pass)
    target = ReplayTarget(real, curve, clock)
    draft = MemoDraft(real, t_draft, rec["read"], clock, memo)
    prompts = select(rec["prompts"], args.prompts)  # exact ids, or patterns as for runs
    policies = args.policies.split(",")
    results: dict[str, dict[str, tuple[float, float, float]]] = {}
    tunables = args.policy
    for policy in policies:
        mode = build(
            policy, ModeContext(target, draft, costs_for(curve, t_draft, clock), draft_max=16, policy=tunables)
        )
        counted = [0, 0]  # accepted tokens and rejections so far: what the profile would hold
        for p in prompts:
            if args.cold:  # a fresh load for every reply, as `localspec run` starts
                prior = None if args.no_profile or not counted[1] else prior_from(counted[0], counted[1], tunables)
                costs = costs_for(curve, t_draft, clock)
                ctx = ModeContext(target, draft, costs, draft_max=16, prior=prior, policy=tunables)
                mode = build(policy, ctx)
            target.true, target.cached, draft.cached = p["prompt"] + p["reply"], [], []
            clock.evals = 0
            engine = mode.engine(target, ReplySpec(len(p["prompt"])))
            stats = RunStats()
            line = ""
            for step in engine.generate(list(p["prompt"]), SamplingParams(), args.max_tokens):
                if args.trace == p["id"]:
                    now = explain(mode.controller.state(), mode.controller.costs).line
                    print(f"{policy} k={step.k} drafted={len(step.drafted)} accepted={step.n_accepted}", end="")
                    print(f"  {now}" if now != line else "")
                    line = now
                stats.add(step)
                counted[0] += step.n_accepted
                counted[1] += step.n_accepted < len(step.drafted)
            results.setdefault(p["id"], {})[policy] = (
                stats.tokens_per_second,
                stats.mean_draft_length,
                stats.acceptance_rate or 0.0,
            )
    memo_path.write_bytes(pickle.dumps(memo))
    report(results, policies)


def report(results: dict, policies: list[str]) -> None:
    print("prompt".ljust(18) + "".join(p.rjust(20) for p in policies) + "   (speed-up, draft length, acceptance)")
    ratios: dict[str, list[float]] = {p: [] for p in policies}
    for pid, row in results.items():
        base = row["none"][0] if "none" in row else 1.0
        cells = []
        for p in policies:
            tps, length, alpha = row[p]
            ratios[p].append(tps / base)
            cells.append(f"{tps / base:6.2f} {length:5.1f} {alpha:4.2f}".rjust(20))
        print(pid.ljust(18) + "".join(cells))
    print("median".ljust(18) + "".join(f"{statistics.median(ratios[p]):6.2f}".rjust(20) for p in policies))
    fixed = [p for p in policies if modes.parse_fixed(p)]
    if "auto" in policies and fixed:
        best = [row["auto"][0] / max(row[p][0] for p in fixed) for row in results.values()]
        print("auto / best fixed: " + " ".join(f"{x:.2f}" for x in best) + f"  (min {min(best):.2f})")


RUN_BINS = (0.0, 0.4, 0.6, 0.8, 0.95, 1.01)  # the first draft token's confidence


def top_token(memo: dict, context: list[int]) -> tuple[int, float] | None:
    """The draft's top token after ``context`` and its probability, from the memo (None: not memoised)."""
    row = memo.get(memo_key(context))
    if row is None:
        return None
    ids, logits, lse = row
    j = int(np.argmax(logits))
    return int(ids[j]), math.exp(float(logits[j]) - lse)


def first_token_runs(prompts: list[dict], memo: dict, n: int = 4) -> list[dict]:
    """How many of ``n`` blindly drafted tokens are accepted, by the first one's confidence: at
    each position of each recorded reply (the true text before it), the draft's top token is
    compared with the reply's there and after it, as a greedy verify would. Beside it what the
    marginal rule's look-ahead expects (every token after the first at the first's confidence).
    Positions whose rows the memo lacks (never replayed) are left out."""
    cells: list[list] = [[] for _ in RUN_BINS[1:]]
    for p in prompts:
        context, reply = list(p["prompt"]), p["reply"]
        tops = [top_token(memo, context + reply[:i]) for i in range(len(reply))]
        for i in range(len(reply) - n):
            if any(t is None for t in tops[i : i + n]):
                continue
            accepted = 0
            while accepted < n and tops[i + accepted][0] == reply[i + accepted]:  # type: ignore[index]
                accepted += 1
            c = tops[i][1]  # type: ignore[index]
            b = next(j for j, hi in enumerate(RUN_BINS[1:]) if c < hi)
            cells[b].append((accepted, sum(c**j for j in range(1, n + 1))))
    rows = []
    for (lo, hi), cell in zip(zip(RUN_BINS, RUN_BINS[1:]), cells):
        if cell:
            rows.append(
                {
                    "confidence": (lo, min(hi, 1.0)),
                    "n": len(cell),
                    "mean_accepted": statistics.mean(a for a, _ in cell),
                    "look_ahead": statistics.mean(e for _, e in cell),
                    "all_accepted": statistics.mean(a == n for a, _ in cell),
                }
            )
    return rows


def unsure_choices(prompts: list[dict], memo: dict, below: float = 0.6) -> dict:
    """At the positions where the draft's top token is under ``below`` sure (the true text before
    each), how often the reply's token there is the draft's first choice, and how often its
    second: what a draft tree of two branches at an unsure token could catch."""
    n = first = second = 0
    for p in prompts:
        context, reply = list(p["prompt"]), p["reply"]
        for i, token in enumerate(reply):
            row = memo.get(memo_key(context + reply[:i]))
            if row is None:
                continue
            ids, logits, lse = row
            order = np.argsort(-logits)
            if math.exp(float(logits[order[0]]) - lse) >= below:
                continue
            n += 1
            first += int(ids[order[0]]) == token
            second += len(order) > 1 and int(ids[order[1]]) == token
    return {"n": n, "first": first / n if n else math.nan, "second": second / n if n else math.nan}


def select(prompts: list[dict], include: str = "", skip: str = "") -> list[dict]:
    """The prompts whose id matches a pattern of ``include`` (comma-separated, shell-style, e.g.
    ``code-*,edit-*``; empty: all) and none of ``skip``."""

    def matches(prompt_id: str, patterns: str) -> bool:
        return any(fnmatch.fnmatchcase(prompt_id, pattern) for pattern in patterns.split(",") if pattern)

    return [p for p in prompts if (not include or matches(p["id"], include)) and not matches(p["id"], skip)]


def runs(args) -> None:
    prompts, memo = [], {}
    for path in args.recordings:
        prompts += json.loads(Path(path).read_text())["prompts"]
        memo.update(pickle.loads(Path(path + ".memo").read_bytes()))
    prompts = select(prompts, args.prompts, args.skip)
    if not prompts:
        wanted = f"--prompts {args.prompts!r} --skip {args.skip!r}"
        raise SystemExit(f"no prompt of {', '.join(args.recordings)} matches {wanted}")
    print("first token's confidence   positions   mean accepted of 4   the look-ahead expects   all 4 accepted")
    for r in first_token_runs(prompts, memo):
        lo, hi = r["confidence"]
        print(
            f"{lo:.2f}-{hi:.2f}".ljust(27) + f"{r['n']:9d}" + f"{r['mean_accepted']:21.2f}"
            f"{r['look_ahead']:25.2f}" + f"{100 * r['all_accepted']:16.0f} %"
        )
    unsure = unsure_choices(prompts, memo)
    print(
        f"where the draft's top token is under 0.6 sure ({unsure['n']} positions), the reply's token is its first "
        f"choice {100 * unsure['first']:.0f} % of the time and its second {100 * unsure['second']:.0f} %"
    )


def memo_rows(memo: dict, draft: CachedModel | None = None):
    """The draft's row after a context, from the memo, else computed by ``draft`` and memoised
    (a step that copied from the context ran no draft pass, so replays leave such rows out)."""

    def row(context: list[int]) -> tuple:
        key = memo_key(context)
        if key not in memo:
            if draft is None:
                raise SystemExit("the memo lacks a row of this reply: give --draft to compute it")
            memo[key] = kept_row(cast(list, draft.sync(context, n_logits=1))[0])
        return memo[key]

    return row


def walk(row, context: list[int], reply: list[int], i: int, k: int, unsure: float | None):
    """One step of ``k`` blind drafts at position ``i`` of a recorded greedy reply (``row``: the
    draft's rows, ``memo_rows``): the tokens the target keeps of them, the draft passes, and the
    verify's rows. ``unsure``: a second branch (the draft's second choice, continued to depth k)
    at the first draft token under that confidence, verified with the first in one batch; None: a
    linear draft. Only the true text's rows are needed: a branch off it is rejected whatever it holds.
    A branch a tree drafter would open past the first rejected token (the confidences there are off
    the true text, so not memoised) is not priced: the tree's cost is a lower bound."""

    def first_two(j: int) -> tuple[int, float, int]:
        ids, logits, lse = row(context + reply[: i + j])
        order = np.argsort(-logits)
        return int(ids[order[0]]), math.exp(float(logits[order[0]]) - lse), int(ids[order[1]])

    n_accepted, branch = 0, None
    for j in range(k):
        top, p_top, _ = first_two(j)
        if unsure is not None and branch is None and p_top < unsure:
            branch = j
        if top != reply[i + j]:
            break
        n_accepted += 1
    passes, rows = k, k + 1
    if branch is not None:
        passes, rows = passes + k - branch - 1, rows + k - branch  # its first token costs no pass
        if n_accepted == branch and first_two(branch)[2] == reply[i + branch]:
            n_accepted += 1
            while n_accepted < k and first_two(n_accepted)[0] == reply[i + n_accepted]:
                n_accepted += 1
    return n_accepted, passes, rows


def tree_speedups(
    prompt: dict, row, curve, t_draft: float, k: int, unsure: float, batched: float, max_tokens: int = 96
):
    """A recorded reply's speed-up over the target alone, drafting ``k`` blindly every step, as a
    linear draft and as a two-branch tree (``walk``); ``batched``: the second branch's passes
    cost this share of a pass each (the draft running both branches in one batch), 1: alone;
    ``max_tokens``: the reply's tokens replayed (as ``replay``, which memoised their rows)."""
    context, reply = list(prompt["prompt"]), list(prompt["reply"])[:max_tokens]
    alone = len(reply) * curve(1)
    out = []
    for branch_at in (None, unsure):
        i, seconds = 0, 0.0
        while i < len(reply):
            k_now = min(k, len(reply) - i - 1)
            n_accepted, passes, rows = walk(row, context, reply, i, k_now, branch_at) if k_now else (0, 0, 1)
            extra = passes - k_now  # the second branch's
            seconds += (k_now + batched * extra) * t_draft + curve(rows)
            i += n_accepted + 1
        out.append(alone / seconds)
    return out


def tree(args) -> None:
    print(f"k = {args.k} drafted blindly every step; the tree branches at the first token under {args.unsure} sure")
    print("prompt                     linear   tree   tree / linear   (speed-up over the target alone)")
    ratios = []
    draft = None
    if args.draft:
        from localspec.llama import backend as llama_backend

        draft = llama_backend.LlamaModel.load(Path(args.draft), 4096, 2, 0)
    for path in args.recordings:
        rec = json.loads(Path(path).read_text())
        memo_path = Path(path + ".memo")
        memo = pickle.loads(memo_path.read_bytes())
        row = memo_rows(memo, draft)
        points, t_draft = {int(n): t for n, t in rec["curve"].items()}, rec["t_draft"]
        if args.shape:
            points, t_draft = reshape(points, t_draft, [float(x) for x in args.shape.split(",")], args.draft_pass)
        curve = VerifyCurve(points).T
        for p in select(rec["prompts"], args.prompts, args.skip):
            linear, branched = tree_speedups(p, row, curve, t_draft, args.k, args.unsure, args.batched, args.max_tokens)
            ratios.append(branched / linear)
            print(f"{p['id']:26s}{linear:7.2f}{branched:7.2f}{branched / linear:12.3f}")
        if draft is not None:
            memo_path.write_bytes(pickle.dumps(memo))
    if ratios:
        print(f"median tree / linear {statistics.median(ratios):.3f} (lowest {min(ratios):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--target", required=True)
    rec.add_argument("--draft", required=True)
    rec.add_argument("--out", required=True)
    rec.add_argument("--max-tokens", type=int, default=96)
    rec.add_argument("--suite", default="default", help="the suite to record: default, heldout or a JSON file")
    rep = sub.add_parser("replay")
    rep.add_argument("recording")
    rep.add_argument("--draft", required=True)
    rep.add_argument("--policies", default="none,auto," + ",".join(modes.sweep_modes()))
    rep.add_argument("--prompts", default="")
    rep.add_argument("--noise", type=float, default=0.0)
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--max-tokens", type=int, default=96)
    rep.add_argument("--trace", default="")
    rep.add_argument(
        "--burst",
        type=parse_burst,
        default=None,
        metavar="START,LENGTH,FACTOR",
        help="target evaluations START to START+LENGTH of each reply (the prefill is 1) and the draft passes "
        "among them run FACTOR times slower: a busy stretch, e.g. 8,12,1.6",
    )
    rep.add_argument(
        "--cold",
        action="store_true",
        help="a fresh controller for every prompt, its acceptance prior what the earlier prompts counted (a profile)",
    )
    rep.add_argument("--no-profile", action="store_true", help="with --cold: every prompt from the default prior")
    rep.add_argument("--shape", default="", help="another machine's T(n)/T(1) for n = 2, 3, ...: 1.58,1.75,1.88")
    rep.add_argument("--draft-pass", type=float, default=None, help="with --shape: a draft pass in T(1), e.g. 0.27")
    rep.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a field of the drafting Policy (localspec/core/policy.py) changed for this replay, e.g. "
        "opening_steps=0 (what a mechanism is worth); repeat for several",
    )
    acc = sub.add_parser("runs", help="accepted tokens of 4 drafted blindly, by the first one's confidence")
    acc.add_argument("recordings", nargs="+", help="recordings replayed at least once (their .memo beside them)")
    acc.add_argument("--prompts", default="", help="only these prompt ids, comma-separated patterns: 'code-*,edit-*'")
    acc.add_argument("--skip", default="", help="not these prompt ids (patterns as --prompts)")
    tr = sub.add_parser("tree", help="blind drafts of k as a linear draft and as a two-branch tree")
    tr.add_argument("recordings", nargs="+", help="recordings replayed at least once (their .memo beside them)")
    tr.add_argument("--k", type=int, default=4)
    tr.add_argument("--draft", default="", help="the draft model, for rows the memo lacks (steps that copied)")
    tr.add_argument("--unsure", type=float, default=0.6, help="branch at the first draft token under this confidence")
    tr.add_argument("--batched", type=float, default=1.0, help="a second-branch pass costs this share of a pass")
    tr.add_argument("--max-tokens", type=int, default=96, help="as replay's: the reply's tokens it memoised")
    tr.add_argument("--prompts", default="")
    tr.add_argument("--skip", default="")
    tr.add_argument("--shape", default="", help="another machine's T(n)/T(1) for n = 2, 3, ...")
    tr.add_argument("--draft-pass", type=float, default=None, help="with --shape: a draft pass in T(1)")
    args = parser.parse_args()
    if args.command == "record":
        record(args)
    elif args.command == "runs":
        runs(args)
    elif args.command == "tree":
        tree(args)
    else:
        args.policy = policy_from(args.set)
        replay(args)


def parse_burst(text: str) -> tuple[int, int, float]:
    """``--burst START,LENGTH,FACTOR``: two whole numbers of target evaluations and a slowdown."""
    problem = argparse.ArgumentTypeError(
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


def policy_from(assignments: list[str]) -> Policy:
    """The default Policy with each ``NAME=VALUE`` of ``--set`` applied; an unknown name stops
    the replay with the list of known ones."""
    policy = Policy()
    for assignment in assignments:
        try:
            policy = policy.with_setting(assignment)
        except ValueError as e:
            raise SystemExit(f"--set {e}") from None
    return policy


if __name__ == "__main__":
    main()
