"""localspec's drafting beside llama.cpp's own, step for step, on tiny random qwen35 GGUFs
that it writes itself: greedy, a fixed draft length N, p_min 0, the same prompt tokens,
context size and threads on both sides.

Checks, each for every N of --n:

- ``mtp``: a target's own MTP (nextn) block drafting for it, localspec's ``llama.mtp.MtpModel``
  against llama.cpp's ``--spec-type draft-mtp``;
- ``hybrid``: a hybrid target (gated delta-net layers beside attention) and a hybrid draft (the
  target plus noise), localspec's ``ModelDrafter`` and its rollback of recurrent caches
  (``llama.recurrent``) against ``--spec-type draft-simple``; ``hybrid-ckpt`` is the same
  with no snapshots on localspec's target, so every rollback there is from a checkpoint;
- ``gemma4``: a Gemma 4 target and its assistant (``llama.assistant``) against ``-md
  ASSISTANT --spec-type draft-mtp``.

Each step is compared at the position it starts from: the drafted tokens, how many the target
accepted, the target's own token, and each draft pass's top 3 candidates with their p (the
softmax over the pass's 10 best logits, which llama.cpp's draft sampler logs to 3 decimals);
then the generated text, byte for byte, and the prompt. llama.cpp's steps come from its debug
log: the ``draft candidate`` lines of each pass, the length it kept (``called impl ..., gen =
G``) and the verdict (``accepted A/B ..., the last target token is: (T)`` or ``partial
acceptance: A < B``). Its log names no prompt ids: the prompt is checked by length (the first
draft's ``hist size``) and by the text its tokens print as.

What llama.cpp does that the comparison allows for:

- with no token budget left it still drafts n_max (``common_speculative_draft`` cuts a draft
  only to a positive budget), so the step whose budget is 0 is left out on both sides;
  budgets of 1..N-1 cut both sides' drafts alike;
- a target that cannot drop a tail (draft-simple's hybrid target gets no ``n_rs_seq``)
  restores a checkpoint after a partial acceptance and evaluates the accepted tokens and the
  correction again as a "draft" that is all accepted, which adds the target's next token
  before the next real draft. Its ``n_drafted``/``n_accept`` count that replay and not the
  rejected draft; here the replay is the target-only step it amounts to, and localspec's
  controller drafts nothing in the step after a partial acceptance (``ReplayAligned``), so
  both sides draft from the same positions.

Build the binary (CPU) from the llama.cpp that llama-cpp-python vendors, the same code as ours:

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36   # then unpack it
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B /tmp/lcpp-build -DCMAKE_BUILD_TYPE=Release \\
          -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF \\
          -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
    cmake --build /tmp/lcpp-build --target llama-speculative-simple -j2

    .venv/bin/python scripts/parity_llamacpp.py --bin /tmp/lcpp-build/bin/llama-speculative-simple

That run also writes llama.cpp's steps to ``tests/fixtures/parity_llamacpp.json`` (with the
llama-cpp-python version and a digest of each tiny model), and CI compares localspec with them,
no binary needed (``tests/scripts/test_parity_fixture.py``; here: the script without ``--bin``).
When the pinned llama-cpp-python changes, that check stops with "regenerate": build the binary
from the new sdist as above, run the script with ``--bin``, and commit the fixture if it passes.
``--wrong zeros|earlier|embedding`` feeds the MTP block and the assistant wrong hidden states
on localspec's side: their checks must then fail.

It exits 0 only when every compared step, the totals, the text and the prompt match (2 for a
stale fixture); a mismatch names the first step that differs, with both sides' steps:

- a different drafted token or p at a pass: the draft read something else there (a position,
  the hidden state given to an MTP entry, position 0's entry, the rows a rollback kept). The
  tiny MTP block follows the next token's embedding closely, so a wrong hidden state in its
  cache often moves the p's and not the argmax: the p's are what catch it;
- the same drafts with another accepted count or target token: the targets differ (prompt
  tokens, the target's rollback);
- a position on one side only: the two stepped differently (budget, replay).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

# first: llama.cpp's libraries before numpy, or a CUDA build crashes loading a model (native.py)
from localspec.llama import native  # noqa: F401

# isort: split
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support
from localspec.core.controller import Choice, FixedController
from localspec.core.costs import CostModel
from localspec.core.drafters import ModelDrafter
from localspec.core.engine import SpeculativeEngine
from localspec.core.protocol import CachedModel
from localspec.core.sampling import SamplingParams
from localspec.llama.assistant import AssistantModel
from localspec.llama.backend import LlamaModel
from localspec.llama.mtp import MtpModel
from tests.support.gemma4_gguf import write_tiny_assistant, write_tiny_gemma4
from tests.support.hybrid_gguf import write_tiny_qwen35
from tests.support.states import WRONG, token_embeddings, wrong_states

GREEDY = SamplingParams(temperature=0.0)
MTP_PROMPT = "hello world def code the model is fast"
HYBRID_PROMPT = "the model is fast and the draft is slow; def x = 1 + 2 hello world"
GEMMA4_PROMPT = "hello world def code the model is fast"
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "parity_llamacpp.json"

CANDIDATE = re.compile(rb"draft candidate\s+(\d+), pos\s+(\d+):\s+(-?\d+) \(\s*([\d.]+)\)")
CALLED = re.compile(rb"called impl \S+, hist size = (\d+), call_count = \d+, gen = (\d+)")
PARTIAL = re.compile(rb"partial acceptance: (\d+) < (\d+)")
ACCEPTED = re.compile(rb"accepted (\d+)/(\d+) draft tokens, the last target token is: \((-?\d+)\)")
SUMMARY = re.compile(rb"(n_drafted|n_accept)\s+=\s+(\d+)")
# llama.cpp prints a candidate's p with 3 decimals (off by up to 0.0005), localspec's are kept to 4
# (0.00005), and the fixture is checked on CPUs other than the one that wrote it, whose kernels
# sum in another order: on a Zen 4 EPYC (AVX-512) the Gemma 4 assistant's p sat up to 0.0002
# further from the fixture's, written on an AVX2 machine. Wrong states move p by far more.
P_TOL = 0.001

Candidates = tuple[tuple[int, float], ...]  # one draft pass's top 3: (token, p over its top 10)


@dataclass(frozen=True)
class Step:
    """One speculative step, either side's."""

    pos: int  # n_past: the position of the context's last token, which the verify reads first
    drafted: tuple[int, ...]
    n_accepted: int
    token: int | None  # the target's own token; None where llama.cpp's log does not name it
    candidates: tuple[Candidates, ...] = ()  # per drafted token: what its draft pass ranked first


@dataclass(frozen=True)
class Run:
    steps: tuple[Step, ...]
    text: bytes  # the generated tokens' pieces
    n_prompt: int
    prompt_text: bytes  # the prompt tokens' pieces
    counters: dict[str, int] = field(default_factory=dict)  # llama.cpp's own summary
    prompt_ids: tuple[int, ...] = ()  # localspec's (llama.cpp's log has no ids for the prompt)


@dataclass(frozen=True)
class Verdict:
    check: str
    n: int
    compared: int  # steps (positions) before the one with no budget left
    matching: int  # the same drafted tokens, accepted count and target token
    same_candidates: int  # ... and the same top 3 with the same p at every draft pass
    drafted: tuple[int, int]  # (llama.cpp, localspec) over the compared steps
    accepted: tuple[int, int]
    text_same: bool
    prompt_same: bool
    first_mismatch: dict | None = None

    @property
    def ok(self) -> bool:
        everything = self.compared == self.matching == self.same_candidates > 0
        return everything and self.text_same and self.prompt_same


class ReplayAligned(FixedController):
    """``FixedController`` that drafts nothing in the step after a partial acceptance: where
    llama.cpp re-evaluates a checkpointed target (the module docstring), it gains exactly
    that target-only step."""

    def __init__(self, costs: CostModel, k: int) -> None:
        super().__init__(costs, k, reason="fixed: llama.cpp's replay schedule")
        self._replay = False

    def choose(self, behind: Callable[[], int] | None = None, budget: int | None = None) -> Choice:
        choice = super().choose(behind, budget)
        return replace(choice, k=0) if self._replay else choice

    def observe(self, n_drafted: int, n_accepted: int, passes: int = 0) -> None:
        super().observe(n_drafted, n_accepted, passes)
        self._replay = n_accepted < n_drafted


# --- llama.cpp's side -------------------------------------------------------------------------
def parse_steps(log: bytes) -> list[Step]:
    """The steps of a ``llama-speculative-simple -lv 5`` log (its stderr)."""
    reader = _LogReader()
    for line in log.splitlines():
        reader.feed(line)
    return reader.steps


class _LogReader:
    """Reads the log top to bottom; a replay after a partial acceptance becomes the
    target-only step at the position it adds a token from (the module docstring)."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.passes: list[Candidates] = []  # the current draft's passes
        self.draft: list[Candidates] = []  # ... as far as it was kept
        self.pos = -1
        self.replay: int | None = None  # the position a replay adds its token from

    def feed(self, line: bytes) -> None:
        if m := CANDIDATE.search(line):
            self._candidate(int(m[1]), int(m[2]), int(m[3]), float(m[4]))
        elif m := CALLED.search(line):
            self.pos, self.draft = int(m[1]), self.passes[: int(m[2])]
        elif m := PARTIAL.search(line):
            self._verdict(int(m[1]), int(m[2]), None)
        elif m := ACCEPTED.search(line):
            self._verdict(int(m[1]), int(m[2]), int(m[3]))

    def _candidate(self, k: int, i: int, token: int, p: float) -> None:
        if k == 0:  # pass i's best; pass 0 starts a draft
            self.passes = self.passes[:i] + [()]
        self.passes[-1] += ((token, p),)

    def _verdict(self, n_accepted: int, n_draft: int, token: int | None) -> None:
        if self.replay is not None and token is not None:
            self.steps.append(Step(self.replay, (), 0, token))
            self.pos, self.replay = self.replay + 1, None
        else:
            kept = tuple(self.draft[:n_draft])
            self.steps.append(Step(self.pos, tuple(c[0][0] for c in kept), n_accepted, token, kept))
            if token is None:  # a partial acceptance: the replay comes next
                self.replay = self.pos + n_accepted + 1
            else:
                self.pos += n_accepted + 1
        self.passes, self.draft = [], []


def split_output(stdout: bytes, prompt_text: bytes) -> tuple[bytes, bytes]:
    """(prompt, generated) from the binary's stdout: "\\n\\n", each prompt token's piece,
    each generated token's piece, then "\\n\\n" twice."""
    body = stdout.removeprefix(b"\n\n").removesuffix(b"\n\n\n\n")
    return body[: len(prompt_text)], body[len(prompt_text) :]


def parse_run(stdout: bytes, stderr: bytes, prompt_text: bytes) -> Run:
    steps = parse_steps(stderr)
    prompt, text = split_output(stdout, prompt_text)
    counters = {m[1].decode(): int(m[2]) for m in SUMMARY.finditer(stderr)}
    n_prompt = steps[0].pos + 1 if steps else 0
    return Run(tuple(steps), text, n_prompt, prompt, counters)


def theirs_command(binary: Path, model: Path, draft: Path | None, spec: str, n: int, args) -> list[str]:
    cmd = [str(binary), "-m", str(model), *(["-md", str(draft)] if draft else []), "-n", str(args.tokens)]
    cmd += ["-c", str(args.ctx), "-b", "512", "-ub", "512", "-t", str(args.threads), "-tb", str(args.threads)]
    cmd += ["--temp", "0", "--top-k", "1", "--seed", "1", "-fit", "off"]
    cmd += ["--spec-type", spec, "--spec-draft-n-max", str(n), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
    return cmd + ["--no-spec-draft-backend-sampling", "-lv", "5", "--log-colors", "off"]


def theirs(cmd: list[str], prompt: str, prompt_text: bytes) -> Run:
    out = subprocess.run([*cmd, "-p", prompt], capture_output=True, check=False)
    if out.returncode != 0:
        tail = out.stderr[-3000:].decode(errors="replace")
        raise RuntimeError(f"{cmd[0]} exited with {out.returncode}:\n{tail}")
    return parse_run(out.stdout, out.stderr, prompt_text)


# --- localspec's side -------------------------------------------------------------------------
def piece(model: LlamaModel, token: int) -> bytes:
    """A token's text as llama-speculative-simple prints it: common_token_to_piece (special
    tokens by name) through printf's %s, which ends at a NUL byte (the <0x00> token prints
    nothing)."""
    text = model.token_text(token) if model.is_special(token) else model.token_bytes(token)
    return text.split(b"\0")[0]


class RecordingDrafter(ModelDrafter):
    """``ModelDrafter`` that keeps each draft pass's top 3 as llama.cpp logs them: p is the
    softmax over the 10 best logits (its draft sampler: top-k 10, then dist)."""

    def __init__(self, model: CachedModel, n_vocab_target: int) -> None:
        super().__init__(model, n_vocab_target, p_min=0.0)
        self.passes: list[Candidates] = []

    def _choose(self, logits, history, params, rng):
        self.passes.append(top_candidates(logits))
        return super()._choose(logits, history, params, rng)


def top_candidates(logits: np.ndarray, k: int = 10, shown: int = 3) -> Candidates:
    best = np.argsort(-logits, kind="stable")[:k]
    p = np.exp(logits[best].astype(np.float64) - logits[best[0]])
    p /= p.sum()
    return tuple((int(t), round(float(q), 4)) for t, q in zip(best[:shown], p[:shown]))


def ours(target: LlamaModel, drafter: RecordingDrafter, controller: FixedController, prompt: str, n_tokens: int) -> Run:
    ids = target.tokenize(prompt)
    engine = SpeculativeEngine(target, drafter, controller)
    steps, text, pos = [], b"", len(ids) - 1
    for s in engine.generate(ids, GREEDY, n_tokens):
        passes, drafter.passes = tuple(drafter.passes[: len(s.drafted)]), []
        if s.token < 0:  # the context filled up: no step
            continue
        steps.append(Step(pos, s.drafted, s.n_accepted, s.token, passes))
        text += b"".join(piece(target, t) for t in s.emitted)
        pos += s.n_accepted + 1
    return Run(tuple(steps), text, len(ids), b"".join(piece(target, t) for t in ids), prompt_ids=tuple(ids))


def ours_mtp(models: dict[str, Path], n: int, args, wrong: str | None = None) -> Run:
    target = LlamaModel.load(models["mtp"], n_ctx=args.ctx, threads=args.threads, snapshots=n, mtp=True)
    mtp = MtpModel(target)
    try:
        with _fed(wrong, target, models["mtp"]):
            drafter = RecordingDrafter(mtp, target.n_vocab)
            return ours(target, drafter, FixedController(CostModel(verify={1: 1.0}), n), MTP_PROMPT, args.tokens)
    finally:
        mtp.close()
        target.close()


def ours_hybrid(models: dict[str, Path], n: int, snapshots: int, args) -> Run:
    """``snapshots`` = n: the target as a session loads it (a whole draft rolls back from the
    verify's states); 0: every rollback from a checkpoint. The draft keeps checkpoints."""
    target = LlamaModel.load(models["target"], n_ctx=args.ctx, threads=args.threads, snapshots=snapshots)
    draft = LlamaModel.load(models["draft"], n_ctx=args.ctx, threads=args.threads)
    try:
        drafter = RecordingDrafter(draft, target.n_vocab)
        return ours(target, drafter, ReplayAligned(CostModel(verify={1: 1.0}), n), HYBRID_PROMPT, args.tokens)
    finally:
        draft.close()
        target.close()


def ours_gemma4(models: dict[str, Path], n: int, args, wrong: str | None = None) -> Run:
    """A Gemma 4 target and its assistant: llama.cpp's ``-md ASSISTANT --spec-type draft-mtp``."""
    target = LlamaModel.load(models["gemma4"], n_ctx=args.ctx, threads=args.threads)
    assistant = AssistantModel(models["assistant"], target)
    try:
        with _fed(wrong, target, models["gemma4"]):
            drafter = RecordingDrafter(assistant, target.n_vocab)
            controller = FixedController(CostModel(verify={1: 1.0}), n)
            return ours(target, drafter, controller, GEMMA4_PROMPT, args.tokens)
    finally:
        assistant.close()
        target.close()


def _fed(wrong: str | None, target: LlamaModel, path: Path) -> contextlib.AbstractContextManager:
    """Every hidden state the drafter reads ``wrong`` (``tests.support.states.WRONG``): the
    comparison's teeth; None: the right ones."""
    return wrong_states(wrong, target, token_embeddings(path)) if wrong else contextlib.nullcontext()


def ours_check(check: str, models: dict[str, Path], n: int, args, wrong: str | None = None) -> Run:
    """localspec's side of one check (the module docstring); ``wrong`` applies to the drafters
    that read the target's states (mtp, gemma4)."""
    if check == "mtp":
        return ours_mtp(models, n, args, wrong)
    if check == "gemma4":
        return ours_gemma4(models, n, args, wrong)
    return ours_hybrid(models, n, n if check == "hybrid" else 0, args)


# --- the comparison -------------------------------------------------------------------------
def same(a: Step | None, b: Step | None) -> bool:
    if a is None or b is None:
        return False
    return a.drafted == b.drafted and a.n_accepted == b.n_accepted and a.token in (None, b.token)


def same_candidates(a: Step | None, b: Step | None) -> bool:
    if not same(a, b) or a is None or b is None or len(a.candidates) != len(b.candidates):
        return False
    return all(same_top(pa, pb) for pa, pb in zip(a.candidates, b.candidates))


def same_top(pa: Candidates, pb: Candidates) -> bool:
    """The same p at every rank, and the same token but where two ranks tie (p within P_TOL in
    either list): another CPU's sums may swap a tie of runners-up, which no draft reads."""
    for i, (x, y) in enumerate(zip(pa, pb, strict=True)):
        if abs(x[1] - y[1]) > P_TOL or (x[0] != y[0] and not (_tied(pa, i) or _tied(pb, i))):
            return False
    return True


def _tied(candidates: Candidates, i: int) -> bool:
    """Rank i's p is within P_TOL of a neighbour's (or it is the last shown: its runner-up is not)."""
    ps = [p for _, p in candidates]
    return i == len(ps) - 1 or any(abs(ps[i] - ps[j]) <= P_TOL for j in (i - 1, i + 1) if 0 <= j < len(ps))


def compare(check: str, n: int, lc: Run, ls: Run, n_tokens: int) -> Verdict:
    """Step by step at each position before the one whose token budget is 0 (the module
    docstring), then the totals there and the generated text."""
    limit = ls.n_prompt - 1 + n_tokens - 1
    a = {s.pos: s for s in lc.steps if s.pos < limit}
    b = {s.pos: s for s in ls.steps if s.pos < limit}
    positions = sorted(a.keys() | b.keys())
    bad = [p for p in positions if not same_candidates(a.get(p), b.get(p))]
    first = None
    if bad:
        p = bad[0]
        first = {"pos": p, "step": positions.index(p), "llama.cpp": _step(a.get(p)), "localspec": _step(b.get(p))}
    return Verdict(
        check=check,
        n=n,
        compared=len(positions),
        matching=sum(same(a.get(p), b.get(p)) for p in positions),
        same_candidates=len(positions) - len(bad),
        drafted=(_drafted(a.values()), _drafted(b.values())),
        accepted=(_accepted(a.values()), _accepted(b.values())),
        text_same=bool(ls.text) and lc.text.startswith(ls.text),
        prompt_same=lc.n_prompt == ls.n_prompt and lc.prompt_text == ls.prompt_text,
        first_mismatch=first,
    )


def _drafted(steps: Iterable[Step]) -> int:
    return sum(len(s.drafted) for s in steps)


def _accepted(steps: Iterable[Step]) -> int:
    return sum(s.n_accepted for s in steps)


def _step(s: Step | None) -> dict | None:
    return asdict(s) if s else None


# --- running and reporting ------------------------------------------------------------------
def write_models(d: Path) -> dict[str, Path]:
    """The tiny models. The fixture is checked on other CPUs, whose kernels sum in another order
    (logits apart by ~1e-5): every run here has a top-2 logit gap of at least 4e-3 at each row
    (the draft's seed chosen for it; tests/scripts/test_parity_fixture.py checks 1e-3)."""
    return {
        # an MTP block that agrees with its target most of the time, and only from its hidden
        # states; the target sometimes leaves its cycle, so some drafts are rejected (hybrid_gguf)
        "mtp": write_tiny_qwen35(d / "mtp.gguf", seed=1, mtp=True, residual=1.2),
        "target": write_tiny_qwen35(d / "target.gguf", seed=1),
        "draft": write_tiny_qwen35(d / "draft.gguf", seed=6, noise_of=1, noise=0.15),
        # an assistant that agrees with its Gemma 4 target often, and only from its states
        "gemma4": write_tiny_gemma4(d / "gemma4.gguf", seed=1, residual=5.0),
        "assistant": write_tiny_assistant(d / "assistant.gguf", target_seed=1),
    }


# llama.cpp's runs, each the reference of the checks beside it: (spec type, target, draft, prompt)
RUNS = {
    "mtp": ("draft-mtp", "mtp", None, MTP_PROMPT),
    "hybrid": ("draft-simple", "target", "draft", HYBRID_PROMPT),
    "gemma4": ("draft-mtp", "gemma4", "assistant", GEMMA4_PROMPT),
}
CHECKS = {"mtp": "mtp", "hybrid": "hybrid", "hybrid-ckpt": "hybrid", "gemma4": "gemma4"}  # check: its run


def run_checks(
    args, models: dict[str, Path], ns: Sequence[int], wrong: str | None = None
) -> list[tuple[Verdict, Run, Run]]:
    """Every check for every N against the binary's runs (``args.bin``)."""
    rows = []
    for n in ns:
        for name, (spec, target, draft, prompt) in RUNS.items():
            mine = {check: ours_check(check, models, n, args, wrong) for check, run in CHECKS.items() if run == name}
            cmd = theirs_command(args.bin, models[target], models[draft] if draft else None, spec, n, args)
            lc = theirs(cmd, prompt, next(iter(mine.values())).prompt_text)
            rows += [(compare(check, n, lc, ls, args.tokens), lc, ls) for check, ls in mine.items()]
    return rows


# --- the fixture: llama.cpp's runs, kept in tests/ so CI compares with no binary -------------
def write_fixture(path: Path, args, models: dict[str, Path], results: list[tuple[Verdict, Run, Run]]) -> None:
    """llama.cpp's run per (run, N), with what they were made from: the version of the llama.cpp
    vendored, the settings and a digest of each tiny model's tensors."""
    import llama_cpp

    runs = {f"{CHECKS[v.check]} {v.n}": run_to_json(lc) for v, lc, _ in results}
    fixture = {
        "llama_cpp_python": llama_cpp.__version__,
        "settings": {"tokens": args.tokens, "ctx": args.ctx, "threads": args.threads},
        "models": {name: tensor_digest(path) for name, path in sorted(models.items())},
        "runs": runs,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fixture, indent=0, separators=(",", ":")) + "\n")


def run_to_json(run: Run) -> dict:
    steps = [
        [s.pos, list(s.drafted), s.n_accepted, s.token, [[list(c) for c in cs] for cs in s.candidates]]
        for s in run.steps
    ]
    return {
        "steps": steps,
        "text": run.text.hex(),
        "n_prompt": run.n_prompt,
        "prompt_text": run.prompt_text.hex(),
        "counters": run.counters,
    }


def run_from_json(d: dict) -> Run:
    steps = tuple(
        Step(
            pos, tuple(drafted), n_accepted, token, tuple(tuple((int(t), float(q)) for t, q in cs) for cs in candidates)
        )
        for pos, drafted, n_accepted, token, candidates in d["steps"]
    )
    return Run(steps, bytes.fromhex(d["text"]), d["n_prompt"], bytes.fromhex(d["prompt_text"]), d["counters"])


def tensor_digest(path: Path) -> str:
    """SHA-256 of a GGUF file's tensors (names, types, shapes, bytes): what the models compute,
    whatever version of the ``gguf`` package wrote the header."""
    import gguf

    h = hashlib.sha256()
    for t in gguf.GGUFReader(str(path)).tensors:
        h.update(f"{t.name}:{t.tensor_type.name}:{list(t.shape)}".encode())
        h.update(t.data.tobytes())
    return h.hexdigest()[:16]


class StaleFixture(Exception):
    """The fixture was made from another llama.cpp or other tiny models: regenerate it."""


REGENERATE = "regenerate it with the binary built from the pinned version (this script's docstring, --fixture)"


def check_fixture(path: Path, models: dict[str, Path], wrong: str | None = None) -> list[tuple[Verdict, Run, Run]]:
    """localspec's steps against llama.cpp's as the fixture keeps them: no binary needed.
    ``wrong``: feed the state-reading drafters wrong states (these checks must then fail)."""
    import llama_cpp

    fixture = json.loads(path.read_text())
    if fixture["llama_cpp_python"] != llama_cpp.__version__:
        raise StaleFixture(
            f"{path} holds llama.cpp's steps from llama-cpp-python {fixture['llama_cpp_python']}, "
            f"this is {llama_cpp.__version__}: {REGENERATE}"
        )
    for name, digest in fixture["models"].items():
        if tensor_digest(models[name]) != digest:
            raise StaleFixture(f"the tiny model {name!r} is not the one {path} was made from: {REGENERATE}")
    args = argparse.Namespace(**fixture["settings"])
    rows = []
    for key, data in fixture["runs"].items():
        name, n = key.split()
        lc = run_from_json(data)
        for check in (c for c, run in CHECKS.items() if run == name):
            ls = ours_check(check, models, int(n), args, wrong)
            rows.append((compare(check, int(n), lc, ls, args.tokens), lc, ls))
    return rows


def report(results: list[tuple[Verdict, Run, Run]]) -> None:
    print(
        "| check | N | steps compared | matching | same top-3 p | drafted llama.cpp/localspec | accepted | same text |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for v, _, _ in results:
        print(
            f"| {v.check} | {v.n} | {v.compared} | {v.matching} | {v.same_candidates} | {v.drafted[0]}/{v.drafted[1]} "
            f"| {v.accepted[0]}/{v.accepted[1]} | {'yes' if v.text_same else 'NO'} |"
        )
    shown: set[tuple[int, ...]] = set()
    for v, lc, ls in results:
        if ls.prompt_ids not in shown:
            shown.add(ls.prompt_ids)
            print(f"\n{v.check} prompt, localspec's {ls.n_prompt} tokens: {list(ls.prompt_ids)}")
            print(
                f"  llama.cpp's {lc.n_prompt} tokens print as {lc.prompt_text!r}: {'same' if v.prompt_same else 'NOT'}"
            )
        if v.first_mismatch:
            print(f"\n{v.check} N={v.n}: first mismatch {json.dumps(v.first_mismatch)}")
    counts = ", ".join(
        f"{v.check} N={v.n} {lc.counters.get('n_drafted')}/{lc.counters.get('n_accept')}" for v, lc, _ in results
    )
    print(f"\nllama.cpp's own n_drafted/n_accept (with the budget-0 step; a replay counted as a draft): {counts}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", type=Path, help="llama-speculative-simple; without it, compare with the fixture")
    p.add_argument(
        "--fixture", type=Path, default=FIXTURE, help=f"the fixture to write (with --bin) or read (default {FIXTURE})"
    )
    p.add_argument("--no-write", action="store_true", help="with --bin: leave the fixture as it is")
    p.add_argument("--n", default="1,3,5", help="draft lengths N (with --bin)")
    p.add_argument("--tokens", type=int, default=64, help="tokens to generate (with --bin)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument(
        "--wrong", choices=WRONG, help="feed the MTP block and the assistant wrong states: the checks must fail"
    )
    p.add_argument("--json", type=Path, help="write every step of both sides here")
    args = p.parse_args(argv)
    ns = [int(n) for n in args.n.split(",")]
    with tempfile.TemporaryDirectory(prefix="localspec-parity-") as tmp:
        models = write_models(Path(tmp))
        if args.bin:
            results = run_checks(args, models, ns, args.wrong)
            if not args.no_write and not args.wrong:
                write_fixture(args.fixture, args, models, results)
        else:
            try:
                results = check_fixture(args.fixture, models, args.wrong)
            except StaleFixture as e:
                print(e, file=sys.stderr)
                return 2
    report(results)
    if args.json:
        rows = [{"verdict": asdict(v), "llama.cpp": asdict(lc), "localspec": asdict(ls)} for v, lc, ls in results]
        args.json.write_text(json.dumps(rows, indent=1, default=lambda b: b.decode(errors="replace")))
    return 0 if all(v.ok for v, _, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
