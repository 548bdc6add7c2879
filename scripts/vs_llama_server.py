"""``localspec serve`` beside ``llama-server`` on repeated work, side by side in one run.

Starts every server of --servers on the same target (and draft), threads and context, then plays
each scenario of a repeated-work suite (``localspec bench --repeated``'s format: a regenerate,
a loop of requests with one system prompt) request by request: request 1 to every server, the
order turned round each request, then request 2, and so on, so each server sees its requests in
order (its history, its n-gram pool and its prompt cache grow as in use) while a noisy machine
slows every server alike. Only the server being asked runs: the others are stopped (SIGSTOP),
so none takes the CPUs from it. One short warm-up request per server comes first.

Servers (--servers, comma-separated):

- ``localspec``: the target alone (``--no-draft --no-history``); ``localspec-draft``: draft mode
  without a history (``--no-history``); ``localspec-history``: draft mode with a history of its
  own, empty at the start (a fresh LOCALSPEC_DATA_DIR);
- ``llama``: plain decoding; ``llama-draft``: the draft model (``--spec-draft-n-max 8
  --spec-draft-p-min 0.75``); ``llama-ngram``: ``--spec-type ngram-mod``, which remembers across
  requests; ``llama-ngram-draft``: both.

Per scenario and server: the tokens, tokens/s by the wall clock (all its replies' tokens over
their request times, prompt processing included), the median of the server's own
``timings.predicted_per_second``, and for a regenerate the last reply's; then each figure over
the best ``llama-ngram*`` server's. Greedy throughout; texts that differ from the first server's
are counted.

    .venv/bin/python scripts/vs_llama_server.py --bin /tmp/lcpp-build/bin/llama-server \\
        --target models/qwen2.5-coder-1.5b-f16.gguf --draft models/qwen2.5-coder-0.5b.gguf \\
        [--scenarios repeated:loop-contacts,repeated-heldout:regen-bash] [--requests 12] [--json out.json]

Build ``llama-server`` from the llama.cpp that llama-cpp-python vendors (scripts/parity_llamacpp.py's
docstring, with ``-DLLAMA_BUILD_SERVER=ON`` and ``--target llama-server``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # serve_bench, beside this
from serve_bench import ask, free_port, wait_ready

from localspec.bench import repeated, suites

SERVERS = (
    "localspec",
    "localspec-draft",
    "localspec-history",
    "llama",
    "llama-draft",
    "llama-ngram",
    "llama-ngram-draft",
)
DEFAULT_SERVERS = "localspec,localspec-draft,localspec-history,llama,llama-ngram,llama-ngram-draft"


@dataclass
class Server:
    name: str
    command: list[str]
    url: str
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    cwd: Path | None = None  # where ``python -m localspec`` runs: another checkout's code (--base)

    def stop(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGCONT)


def server_command(name: str, args, port: int) -> list[str]:
    """The command line of server ``name`` (``SERVERS``) on ``port``."""
    threads, ctx = str(args.threads), str(args.ctx)
    if name.startswith("localspec"):
        cmd = [sys.executable, "-m", "localspec", "serve", "--target", str(args.target), "--port", str(port)]
        cmd += ["--threads", threads, "--ctx", ctx, "--log-level", "warning", *args.localspec_args.split()]
        if name == "localspec":
            return cmd + ["--no-draft", "--no-history"]
        return cmd + ["--draft", str(args.draft)] + (["--no-history"] if name == "localspec-draft" else [])
    cmd = [str(args.bin), "-m", str(args.target), "--port", str(port), "-t", threads, "-tb", threads, "-c", ctx]
    cmd += ["-np", "1", "--temp", "0"]
    draft = ["-md", str(args.draft), "--spec-draft-n-max", "8", "--spec-draft-p-min", "0.75"]
    return (
        cmd
        + {
            "llama": [],
            "llama-draft": draft,
            "llama-ngram": ["--spec-type", "ngram-mod"],
            "llama-ngram-draft": [*draft, "--spec-type", "ngram-mod,draft-simple"],
        }[name]
    )


def chat_requests(scenario: dict, max_tokens: int, n: int | None = None) -> list[dict]:
    """The chat requests a regenerate or a requests scenario sends, in order (at most ``n``)."""
    limit = scenario.get("max_tokens", max_tokens)
    if scenario["kind"] == "regenerate":
        messages = [[{"role": "user", "content": scenario["prompt"]}]] * scenario.get("times", 2)
    elif scenario["kind"] == "requests":
        system = [{"role": "system", "content": scenario["system"]}] if scenario.get("system") else []
        messages = [
            [*system, {"role": "user", "content": scenario["template"].replace("{input}", text)}]
            for text in scenario["inputs"]
        ]
    else:
        raise ValueError(f"scenario {scenario['id']}: only regenerate and requests scenarios go to a server")
    return [{"messages": m, "max_tokens": limit, "temperature": 0} for m in messages[:n]]


def reply_row(out: dict, wall: float) -> dict:
    t = out.get("timings", {})
    return {
        "tokens": out["usage"]["completion_tokens"],
        "wall_s": wall,
        "server_tps": t.get("predicted_per_second"),
        "text": out["choices"][0]["message"]["content"],
    }


def play(servers: list[Server], bodies: list[dict]) -> dict[str, list[dict]]:
    """Every request to every server, interleaved by request (the order turned round each time)."""
    rows: dict[str, list[dict]] = {s.name: [] for s in servers}
    for i, body in enumerate(bodies):
        for s in servers[i % len(servers) :] + servers[: i % len(servers)]:
            s.resume()
            try:
                out, wall = ask(s.url, body, None)
            finally:
                s.stop()
            rows[s.name].append(reply_row(out, wall))
            print(f"request {i + 1} {s.name:18s} {rows[s.name][-1]['tokens']:4d} tokens {wall:6.1f} s", file=sys.stderr)
    return rows


def summarise(rows: dict[str, list[dict]], regenerate: bool) -> dict[str, dict]:
    """Per server its figures, and each over the best llama-ngram* server's."""
    first = next(iter(rows.values()))
    out = {}
    for name, rs in rows.items():
        tokens = sum(r["tokens"] for r in rs)
        out[name] = {
            "tokens": tokens,
            "wall_tps": tokens / sum(r["wall_s"] for r in rs),
            "server_tps": statistics.median(r["server_tps"] or 0.0 for r in rs),
            "last_tps": rs[-1]["tokens"] / rs[-1]["wall_s"] if regenerate else None,
            "texts_differ": sum(a["text"] != b["text"] for a, b in zip(rs, first)),
        }
    ngram = [s for n, s in out.items() if n.startswith("llama-ngram")]
    for key in ("wall_tps", "server_tps", "last_tps"):
        best = max((s[key] for s in ngram if s[key]), default=None)
        for s in out.values():
            s[f"{key}_over_ngram"] = s[key] / best if best and s[key] else None
    return out


def markdown(results: dict[str, dict[str, dict]]) -> str:
    lines = []
    for scenario, summary in results.items():
        lines += [
            f"\n{scenario}: tok/s (÷ the best llama-ngram server's)\n",
            "| server | tokens | wall clock | server's own, median | last reply (wall) | texts unlike the first's |",
            "|---|---|---|---|---|---|",
        ]
        for name, s in summary.items():
            cells = [_cell(s, k) for k in ("wall_tps", "server_tps", "last_tps")]
            lines.append(f"| {name} | {s['tokens']} | " + " | ".join(cells) + f" | {s['texts_differ']} |")
    return "\n".join(lines)


def _cell(s: dict, key: str) -> str:
    if s[key] is None:
        return "—"
    ratio = s[f"{key}_over_ngram"]
    return f"{s[key]:.1f}" + (f" ({ratio:.2f})" if ratio else "")


def ask_streamed(url: str, body: dict) -> dict:
    """One streamed chat request as a user waits for it: the seconds to the first text and to
    the end, the text, and the server's ``timings`` (its last chunk's)."""
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps({**body, "stream": True}).encode(),
        {"Content-Type": "application/json"},
    )
    t0, first, text, timings = time.perf_counter(), None, [], {}
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            timings = chunk.get("timings") or timings
            piece = "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices", []))
            if piece and first is None:
                first = time.perf_counter() - t0
            text.append(piece)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "ttft_s": first or wall, "text": "".join(text), "timings": timings}


def play_suite(
    servers: list[Server], prompts: list[dict], max_tokens: int, rounds: int, system: str = ""
) -> list[dict]:
    """Each prompt to every server (the order turned round each request), the suite ``rounds``
    times: one row per request. ``system``: a system message for every request, so every server
    reads the same prompt (without one, llama-server's template adds Qwen's default system
    prompt, 24 tokens, and localspec's does not)."""
    rows, i = [], 0
    lead = [{"role": "system", "content": system}] if system else []
    for r in range(rounds):
        for prompt in prompts:
            body = {"messages": [*lead, {"role": "user", "content": prompt["prompt"]}], "max_tokens": max_tokens}
            body |= {"temperature": 0, "cache_prompt": False}
            for s in servers[i % len(servers) :] + servers[: i % len(servers)]:
                s.resume()
                try:
                    out = ask_streamed(s.url, body)
                finally:
                    s.stop()
                t = out.pop("timings")
                out |= {"round": r, "prompt": prompt["id"], "server": s.name, "prompt_n": t.get("prompt_n")}
                out |= {"prompt_tps": t.get("prompt_per_second"), "decode_tps": t.get("predicted_per_second")}
                out |= {"tokens": t.get("predicted_n"), "drafted": t.get("draft_n"), "drafting": t.get("drafting")}
                rows.append(out)
                print(
                    f"round {r + 1} {prompt['id']:24s} {s.name:16s} {out['prompt_n']:5} prompt tokens "
                    f"{out['wall_s']:6.1f} s (first text {out['ttft_s']:5.1f} s), "
                    f"decode {out['decode_tps'] or 0:.2f} tok/s, drafted {out['drafted']}"
                    + (f": {out['drafting'].get('line') or out['drafting'].get('why')}" if out["drafting"] else ""),
                    file=sys.stderr,
                    flush=True,
                )
            i += 1
    return rows


def suite_summary(rows: list[dict], base: str) -> dict[str, dict]:
    """Per server, each figure over the ``base`` server's on the same request (prompt, round):
    the median, the worst and the best of the per-request ratios, and texts unlike base's."""
    by = {(r["server"], r["prompt"], r["round"]): r for r in rows}
    out = {}
    for name in dict.fromkeys(r["server"] for r in rows):
        pairs = [(r, by[(base, r["prompt"], r["round"])]) for r in rows if r["server"] == name]
        out[name] = {
            "requests": len(pairs),
            "wall": _range(_ratios(pairs, "wall_s", inverse=True)),  # speed: base's time over this one's
            "first_text": _range(_ratios(pairs, "ttft_s"), worst=max),  # time: this one's over base's
            "decode": _range(_ratios(pairs, "decode_tps")),
            "prompt_reading": _range(_ratios(pairs, "prompt_tps")),
            "texts_differ": sum(r["text"] != b["text"] for r, b in pairs),
        }
    return out


def _ratios(pairs: list[tuple[dict, dict]], key: str, inverse: bool = False) -> list[float]:
    return [(b[key] / r[key]) if inverse else (r[key] / b[key]) for r, b in pairs if r[key] and b[key]]


def _range(xs: list[float], worst=min) -> dict | None:
    best = max if worst is min else min
    return {"median": statistics.median(xs), "worst": worst(xs), "best": best(xs)} if xs else None


def suite_markdown(summary: dict[str, dict], base: str) -> str:
    lines = [
        f"\nover {base}, per request: median (lowest–highest)\n",
        "| server | requests | speed, wall clock | time to first text | decode tok/s | prompt tok/s | texts unlike |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        cells = [_fmt(s[k]) for k in ("wall", "first_text", "decode", "prompt_reading")]
        lines.append(f"| {name} | {s['requests']} | " + " | ".join(cells) + f" | {s['texts_differ']} |")
    return "\n".join(lines)


def _fmt(r: dict | None) -> str:
    return f"{r['median']:.3f} (worst {r['worst']:.3f}, best {r['best']:.3f})" if r else "—"


def start(servers: list[Server]) -> None:
    """Start each server, wait for its health check and its warm-up reply, and stop it."""
    for s in servers:
        s.proc = subprocess.Popen(
            s.command, env={**os.environ, **s.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=s.cwd
        )
        wait_ready(s.proc, s.url, f"{s.name} ({' '.join(s.command)})")
        ask(s.url, {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0}, None)
        s.stop()


def pick(entry: str) -> tuple[dict, int]:
    """(scenario, the suite's reply length) for ``SUITE:ID``."""
    name, _, scenario_id = entry.rpartition(":")
    suite = repeated.load(name)
    found = [sc for sc in suite["scenarios"] if sc["id"] == scenario_id]
    if not found:
        ids = ", ".join(sc["id"] for sc in suite["scenarios"])
        raise SystemExit(f"no scenario {scenario_id!r} in {name}: one of {ids}")
    return found[0], suite.get("max_tokens", 200)


def suite_of(spec: str) -> dict:
    """``--suite NAME[:ID,ID]``: the suite, cut to those prompts (ValueError naming the known
    ones where an id is not there: asked before any server starts)."""
    name, _, ids = spec.partition(":")
    return suites.only(suites.load_suite(name), ids or None)


def run_suite(servers: list[Server], suite: dict, args) -> int:
    max_tokens = args.max_tokens or suite.get("max_tokens", suites.SUITE_MAX_TOKENS)
    rows = play_suite(servers, suite["prompts"], max_tokens, args.rounds, args.system)
    base = args.baseline or servers[0].name
    summary = suite_summary(rows, base)
    print(suite_markdown(summary, base))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", type=Path, required=True, help="llama-server")
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--draft", type=Path, required=True)
    p.add_argument("--servers", default=DEFAULT_SERVERS, help=f"from {', '.join(SERVERS)}")
    p.add_argument(
        "--scenarios",
        default="repeated:loop-contacts,repeated-heldout:regen-bash",
        help="SUITE:ID, comma-separated: a built-in repeated-work suite (or a file) and a scenario of it",
    )
    p.add_argument("--requests", type=int, default=None, help="at most this many requests of each scenario")
    p.add_argument(
        "--suite",
        help="a bench suite instead (e.g. 'documents' or 'summaries', or SUITE:ID,ID): each prompt one "
        "request to every server, streamed, timed as a user waits",
    )
    p.add_argument("--rounds", type=int, default=1, help="--suite: play it this many times")
    p.add_argument("--baseline", default=None, help="--suite: the server the others are measured against (the first)")
    p.add_argument("--max-tokens", type=int, default=None, help="--suite: the reply length (the suite's)")
    p.add_argument(
        "--system", default="", help="--suite: a system message for every request (the same prompt for every server)"
    )
    p.add_argument(
        "--localspec-args", default="", help="more options for every localspec server (e.g. '--draft-max 24')"
    )
    p.add_argument(
        "--base",
        type=Path,
        help="a checkout of another commit (git worktree add DIR REV): its localspec servers run too, "
        "named base-SERVER (give --servers with them, e.g. localspec,localspec-draft,base-localspec-draft)",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    names = args.servers.split(",")
    args.target, args.draft = args.target.resolve(), args.draft.resolve()  # (a --base server runs elsewhere)
    if unknown := [
        n for n in names if n.removeprefix("base-") not in SERVERS or (n != n.removeprefix("base-") and not args.base)
    ]:
        p.error(f"unknown servers {unknown}: give some of {', '.join(SERVERS)}")
    scenarios = [] if args.suite else [pick(entry) for entry in args.scenarios.split(",")]
    try:  # read before any server starts
        suite = suite_of(args.suite) if args.suite else None
    except ValueError as e:
        raise SystemExit(f"--suite: {e}") from None
    with tempfile.TemporaryDirectory(prefix="localspec-vs-") as tmp:
        servers = []
        for name in names:
            port = free_port()
            env = {"LOCALSPEC_DATA_DIR": str(Path(tmp) / name)}
            cwd = args.base if name.startswith("base-") else None
            command = server_command(name.removeprefix("base-"), args, port)
            servers.append(Server(name, command, f"http://127.0.0.1:{port}", env, cwd=cwd))
        try:
            start(servers)
            if suite is not None:
                return run_suite(servers, suite, args)
            results = {}
            for sc, max_tokens in scenarios:
                rows = play(servers, chat_requests(sc, max_tokens, args.requests))
                results[sc["id"]] = summarise(rows, sc["kind"] == "regenerate")
        finally:
            for s in servers:
                if s.proc:
                    s.resume()
                    s.proc.terminate()
                    s.proc.wait(timeout=60)
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
