"""Issue 66: no combination of the drafting options reaches a traceback. A short reply of
``localspec run`` and a request to ``localspec serve``, both in-process on the tiny pair, for
combinations of the drafting mode (--draft, --lookup, --no-draft, or none given), --draft-max
(0 included), --p-min, --no-adapt, --no-copy, --no-history and the reply's --seed and --temp;
a request also names a drafting type and a longest draft of its own (``speculative``).

The default run takes the issue's cases and a pairwise set (every two values of two options
together at least once, ``combinations.pairwise``: 23 cases, ~12 s on 2 cores);
``pytest -m fuzz`` takes every combination of the options through ``run`` (1,536 replies)
and of the server's options through ``serve``, each server answering every drafting type and
longest draft a request may name (384 servers; ~13 minutes in all).
"""

from __future__ import annotations

import io
import itertools
import json
import threading
from contextlib import redirect_stdout
from typing import Any

import httpx
import pytest

from localspec.cli import main
from localspec.core.options import MAX_DRAFT
from localspec.serve import serving
from tests.support.combinations import every, pairwise
from tests.support.live_server import MESSAGES, PROMPT, STUCK_S, post, wait_for

# the options of a load (run's and serve's flags) and of a reply (run's flags, a request's fields)
LOAD = {
    "mode": ["draft", "lookup", "none", "plain"],  # --draft D, --lookup, --no-draft, no flag
    "draft_max": [None, 0, 1, MAX_DRAFT],  # None: not given (the default, 16)
    "p_min": [None, 0.75, 1.0],
    "adaptive": [True, False],
    "copy": [True, False],
    "history": [True, False],
}
REPLY = {"seed": [None, 7], "temperature": [0.0, 0.8]}
REQUEST = {"type": [None, "draft", "lookup", "none"], "n_max": [None, 0, 1, MAX_DRAFT]}
N_TOKENS = 2  # one step, and the next: enough to run the drafting each combination sets up

Case = dict[str, Any]


def case_id(case: Case) -> str:
    """'mode:draft-draft_max:0-adaptive:True-...' (what -k selects by)."""
    return "-".join(f"{k}:{v}" for k, v in case.items() if v is not None)


def load_flags(case: Case, tiny_pair) -> list[str]:
    mode = {"draft": ["--draft", str(tiny_pair[1])], "lookup": ["--lookup"], "none": ["--no-draft"], "plain": []}
    flags = ["--target", str(tiny_pair[0]), *mode[case["mode"]], "--threads", "1", "--ctx", "512"]
    flags += ["--draft-max", str(case["draft_max"])] if case["draft_max"] is not None else []
    flags += ["--p-min", str(case["p_min"])] if case["p_min"] is not None else []
    flags += [] if case["adaptive"] else ["--no-adapt"]
    flags += [] if case["copy"] else ["--no-copy"]
    return flags + ([] if case["history"] else ["--no-history"])


# --- what each combination should come to, written out apart from localspec's own rule ---------
def loaded_mode(case: Case) -> str:
    """The pair's drafting: a longest draft of 0 never drafts, so the target alone is loaded."""
    if case["draft_max"] == 0:
        return "none"
    return {"draft": "draft", "lookup": "lookup"}.get(case["mode"], "none")


def asked_mode(request: Case, case: Case) -> str:
    """A request's drafting: its own longest draft, else the server's; 0 drafts nothing."""
    longest = request["n_max"] if request["n_max"] is not None else case["draft_max"]
    return "none" if longest == 0 else request["type"] or loaded_mode(case)


# --- one reply of `localspec run`, one request to `localspec serve` ----------------------------
def check_run(case: Case, tiny_pair, capsys) -> None:
    reply = ["--temp", str(case["temperature"])] + (["--seed", str(case["seed"])] if case["seed"] is not None else [])
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["run", *load_flags(case, tiny_pair), *reply, "--max-tokens", str(N_TOKENS), "--json", PROMPT])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err
    got = json.loads(out.getvalue())
    assert got["mode"] == loaded_mode(case) and got["n_tokens"] >= 1
    if got["mode"] == "none":
        assert got["n_drafted"] == 0


def body(request: Case) -> dict:
    speculative = {k: request[k] for k in ("type", "n_max") if request[k] is not None}
    seed = {"seed": request["seed"]} if request["seed"] is not None else {}
    return {"messages": MESSAGES, "max_tokens": N_TOKENS, "temperature": request["temperature"], **seed} | (
        {"speculative": speculative} if speculative else {}
    )


def serve_once(case: Case, requests: list[Case], tiny_pair, monkeypatch) -> list[httpx.Response]:
    """``localspec serve`` with ``case``'s flags as the command runs it (its option checks, its
    load, its ``Served``), on a free port; ``requests`` are sent once it listens, then it stops
    as SIGINT would stop it (uvicorn's exit, the running reply drained)."""
    answers: list[httpx.Response] = []

    def serve_these(app, sockets, log_level) -> None:
        server = serving.make_server(app, log_level="warning")
        thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
        thread.start()
        try:
            assert wait_for(lambda: server.started), "the server did not start"
            base = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
            answers.extend(post(base, body(r)) for r in requests)
        finally:
            server.should_exit = True
            thread.join(STUCK_S)
            app.state.api.line.drain(STUCK_S)

    monkeypatch.setattr(serving, "serve", serve_these)
    assert main(["serve", *load_flags(case, tiny_pair), "--port", "0", "--log-level", "warning"]) == 0
    return answers


def check_serve(case: Case, requests: list[Case], tiny_pair, monkeypatch) -> None:
    for request, r in zip(requests, serve_once(case, requests, tiny_pair, monkeypatch), strict=True):
        mode = asked_mode(request, case)
        if mode == "draft" and loaded_mode(case) != "draft":  # no draft model loaded: a clear refusal
            assert r.status_code == 400 and r.json()["error"]["param"] == "speculative.type", (request, r.text)
            continue
        assert r.status_code == 200, (request, r.text)
        timings = r.json()["timings"]
        assert timings["drafting"]["mode"] == mode and timings["predicted_n"] >= 1, request
        if mode == "none":
            assert timings["draft_n"] == 0


def issue_case(**values) -> Case:
    """A case of the issue's own, the other options at their first value."""
    return {name: options[0] for name, options in (LOAD | REPLY | REQUEST).items()} | values


# the issue's command lines (--draft-max 0 with a drafting mode), each with a request that
# leaves the longest draft to the server's --draft-max 0: three options together, which a
# pairwise set need not hold
ISSUE = [
    issue_case(mode="draft", draft_max=0),
    issue_case(mode="lookup", draft_max=0, type="lookup"),
    issue_case(mode="draft", draft_max=0, type="draft", n_max=2),  # no draft was loaded: refused
]
PAIRWISE = pairwise(LOAD | REPLY | REQUEST)


class TestEveryCombination:
    @pytest.mark.parametrize("case", ISSUE + PAIRWISE, ids=case_id)
    def test_run_and_serve_reply(self, case, tiny_pair, capsys, monkeypatch):
        check_run(case, tiny_pair, capsys)
        check_serve(case, [case], tiny_pair, monkeypatch)

    @pytest.mark.fuzz
    @pytest.mark.parametrize("case", every(LOAD | REPLY), ids=case_id)
    def test_run_replies_for_every_combination(self, case, tiny_pair, capsys):
        check_run(case, tiny_pair, capsys)

    @pytest.mark.fuzz
    @pytest.mark.parametrize("case", every(LOAD), ids=case_id)
    def test_serve_replies_to_every_request_for_every_combination(self, case, tiny_pair, monkeypatch):
        check_serve(case, EVERY_REQUEST, tiny_pair, monkeypatch)


class TestThePairwiseSet:
    def test_it_holds_every_two_values_of_every_two_options(self):
        dims = LOAD | REPLY | REQUEST
        for a, b in itertools.combinations(dims, 2):
            held = {(case[a], case[b]) for case in PAIRWISE}
            assert held == set(itertools.product(dims[a], dims[b])), (a, b)
        assert len(PAIRWISE) < len(every(dims)) // 500


# every drafting type and longest draft a request may name, at each seed and temperature in turn
# (their every combination with the load's options is the run's test above)
EVERY_REQUEST = [r | every(REPLY)[i % len(every(REPLY))] for i, r in enumerate(every(REQUEST))]
