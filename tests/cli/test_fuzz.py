"""Issue 12: no option value or prompt reaches a llama.cpp assert. Hypothesis draws `localspec
run` command lines (context, reply length, drafting options, threads, sampling, --raw,
--system, prompts from empty to longer than the context, each drafting mode) on the tiny GGUF
pair. Each runs in its own process, since an abort would take pytest down with it, and must
end with exit 0 or a clean error: exit 2 and one 'error:' line within TIME_LIMIT, no traceback,
no signal, no hang. An option out of range must be refused with options.check's message.

The CI set is 40 fixed cases (derandomized, ~30 s on 2 cores) plus the issue's own cases;
the longer run is ``pytest -m fuzz tests/test_fuzz_cli.py`` (LOCALSPEC_FUZZ_EXAMPLES cases,
default 500; LOCALSPEC_FUZZ_REPORT=path.json writes its figures).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import localspec
from localspec.cli import build_parser
from localspec.cli import flags as cli_flags
from localspec.cli.run import LOAD_GROUPS, REPLY_GROUPS
from localspec.core import options

TIME_LIMIT = 10.0  # seconds: the issue's bound for a clean refusal
HANG_LIMIT = 60.0  # seconds for any case: a reply of up to 512 tokens on a busy 2-core machine
CI_CASES = 40
LONG_CASES = int(os.environ.get("LOCALSPEC_FUZZ_EXAMPLES", "500"))
SOURCE_ROOT = Path(localspec.__file__).resolve().parent.parent  # the child runs this checkout
FIGURES: dict = {"cases": 0, "exit_codes": Counter(), "max_seconds": 0.0, "messages": Counter()}


@dataclass(frozen=True)
class Case:
    flags: tuple[str, ...] = ()
    mode: str = "draft"  # draft | lookup | none | plain (no drafting flag)
    prompt: str | bytes = "hello world"  # bytes go through stdin ('-'), as a piped file would
    stdin: bool = False


# --- strategies -------------------------------------------------------------------------------
def _num(x) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


def _edges(name: str) -> list:
    """Each option's bounds and one step past them."""
    opt = options.OPTIONS[name]
    step = 1 if opt.kind is int else 0.01
    return [v for b in (opt.lo, opt.hi) if b is not None for v in (b - step, b, b + step)]


def _value(name: str):
    """Any value: the range's edges and beyond, huge numbers, nan and infinities."""
    opt = options.OPTIONS[name]
    edges = st.sampled_from(_edges(name))
    if opt.kind is int:
        return st.one_of(edges, st.integers(-3, 600), st.integers(-(2**70), 2**70))
    return st.one_of(
        edges, edges.map(float), st.floats(-1.0, 6.0), st.sampled_from([math.nan, math.inf, -math.inf, 1e-300, 5e-324])
    )


# the options `run` checks, in its order; each flag's value is stored under its option's name
CHECKED = [
    name for group in (*LOAD_GROUPS, *REPLY_GROUPS) for name in cli_flags.flagged(group) if name in options.OPTIONS
]
# Allowed values, small where size costs time on the tiny models (each case must stay fast)
ALLOWED = {
    "n_ctx": st.sampled_from([256, 257, 300, 512, 4096, options.MAX_CTX]),
    "max_tokens": st.integers(1, 48),
    "threads": st.sampled_from([1, 2, 3, 64, 512]),
    "seed": st.integers(0, options.UINT64_MAX),
    "top_k": st.integers(0, 400) | st.just(options.INT32_MAX),
}


def _allowed(name: str):
    opt = options.OPTIONS[name]
    if name in ALLOWED:
        return ALLOWED[name]
    if opt.kind is int:
        return st.integers(opt.lo, min(opt.hi, 10_000))
    return st.floats(opt.lo, opt.hi, exclude_min=opt.lo_open)


PROMPTS = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "a",
            "hello world",
            "def f(x):\n    return x + 1\n",
            "the model is fast " * 40,  # ~770 tokens: longer than the tiny models' 512
            "안녕 세계 😀 🇰🇷 e\u0301",
        ]
    ),
    st.text(max_size=80),
    st.text(alphabet="ab \n", min_size=200, max_size=2000),
    st.binary(max_size=120),  # invalid UTF-8 and NUL bytes, through stdin
)


@st.composite
def cases(draw) -> Case:
    flags: list[str] = []
    in_range = draw(st.booleans())  # half the cases run a reply, half are refusals of some kind
    for name in CHECKED:
        if draw(st.booleans()):
            value = draw(_allowed(name) if in_range else _value(name))
            flags.append(f"{options.OPTIONS[name].flag}={_num(value)}")  # '=': '-inf' is no flag
        elif name == "max_tokens":  # not the default 512: replies stay short, cases fast
            flags.append(f"--max-tokens={draw(ALLOWED['max_tokens'])}")
        elif name == "threads":  # not every CPU: on a busy machine their spin-waits dominate
            flags.append("--threads=1")
    for flag in ("--raw", "--no-adapt", "--no-copy", "--json"):
        if draw(st.booleans()):
            flags.append(flag)
    if draw(st.booleans()):
        flags += ["--rule", draw(st.sampled_from(["speculative", "match"]))]
    if draw(st.integers(0, 3)) == 0:
        flags += ["--system", draw(st.sampled_from(["", "Be brief.", "x " * 300])) or " "]
    prompt = draw(PROMPTS)
    stdin = isinstance(prompt, bytes) or "\x00" in prompt or draw(st.booleans())
    return Case(tuple(flags), draw(st.sampled_from(["draft", "lookup", "none", "plain"])), prompt, stdin)


# --- running one case -------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("LOCALSPEC_FUZZ_REPORT")
    if path and FIGURES["cases"]:
        Path(path).write_text(json.dumps(FIGURES, indent=1, default=dict))


def argv(case: Case, tiny_pair) -> list[str]:
    mode = {"draft": ["--draft", str(tiny_pair[1])], "lookup": ["--lookup"], "none": ["--no-draft"], "plain": []}
    prompt = "-" if case.stdin else case.prompt
    return ["run", "--target", str(tiny_pair[0]), *mode[case.mode], *case.flags, "--", prompt]


def expected_refusal(case: Case, tiny_pair) -> str | None:
    """options.check's message for the first flag out of range, in cmd_run's order."""
    args = build_parser().parse_args(argv(case, tiny_pair))
    for name in CHECKED:
        problem = options.check(name, getattr(args, name))
        if problem:
            return f"error: {problem}"
    return None


def run_case(case: Case, tiny_pair) -> None:
    data = case.prompt if isinstance(case.prompt, bytes) else case.prompt.encode()
    env = {**os.environ, "PYTHONPATH": str(SOURCE_ROOT)}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "localspec", *argv(case, tiny_pair)],
            env=env,
            input=data if case.stdin else b"",
            capture_output=True,
            timeout=HANG_LIMIT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"no exit within {HANG_LIMIT:.0f} s: {case}")
    seconds = time.perf_counter() - t0
    err = done.stderr.decode("utf-8", "replace")
    FIGURES["cases"] += 1
    FIGURES["exit_codes"][done.returncode] += 1
    key = "max_seconds" if done.returncode == 0 else "max_seconds_refused"
    FIGURES[key] = max(FIGURES.get(key, 0.0), round(seconds, 2))
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    for line in errors:
        FIGURES["messages"][line.split("(")[0].split(";")[0][:48]] += 1
    context = f"{case}\nexit {done.returncode} after {seconds:.1f} s\n{err[-3000:]}"
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {context}"
    assert "Traceback" not in err, context
    assert done.returncode == 0 or seconds < TIME_LIMIT, context
    refusal = expected_refusal(case, tiny_pair)
    if refusal:
        assert done.returncode == 2 and errors == [refusal], context
    elif done.returncode == 0:
        assert errors == [], context
    else:  # the only refusals left: an empty prompt, or one the context cannot hold
        assert done.returncode == 2 and len(errors) == 1, context
        assert errors[0].startswith(("error: the prompt is empty", "error: the prompt is ")), context


def issue_cases():
    """The command lines of issue 12, on the tiny pair."""
    long = "hello there this is a long prompt that will not fit in sixteen tokens at all no way"
    return [
        Case(("--ctx", "16"), "plain", long),
        Case(("--ctx", "1"), "plain", long),
        Case(("--ctx", "32"), "draft", long),
        Case(("--ctx", "24"), "lookup", long),
        Case(("--threads", "999", "--max-tokens", "40"), "plain", "Write hello world in C"),
        Case(("--temp", "-1"), "plain", "hi"),
        Case(("--ctx", "256"), "draft", "the model is fast " * 40),
        Case(("--ctx", "300", "--max-tokens", "40"), "lookup", "the model is fast " * 4),
    ]


CI = settings(
    max_examples=CI_CASES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class TestRunNeverAborts:
    @pytest.mark.parametrize("case", issue_cases(), ids=lambda c: " ".join(c.flags)[:30] + f" {c.mode}")
    def test_the_issues_command_lines(self, tiny_pair, case):
        run_case(case, tiny_pair)

    @CI
    @given(case=cases())
    def test_drawn_command_lines(self, tiny_pair, case):
        run_case(case, tiny_pair)

    @pytest.mark.fuzz
    @settings(CI, max_examples=LONG_CASES, derandomize=False)
    @given(case=cases())
    def test_many_drawn_command_lines(self, tiny_pair, case):
        run_case(case, tiny_pair)
