"""Speed-ups through ``localspec serve`` on an edit request: draft vs lookup vs none.

Starts the server on the pair (or uses ``--url``), sends the same edit request from the bench
suite with ``speculative.type`` = draft, lookup and none, interleaved (the order rotates each
round, so a machine that slows down over time slows every mode alike), after one warm-up
request per mode. Every measured request after the first finds the prompt in the KV cache, as
an editor's follow-up does, so the figures are decode speed. Reported per mode: the medians of
the server's ``timings.predicted_per_second`` and of tokens/s end to end (client wall clock),
the speed-up against none (median of the per-round ratios), acceptance, tokens per target
pass, and whether the greedy text equals none's.

    .venv/bin/python scripts/serve_bench.py --target models/qwen2.5-coder-1.5b.gguf \\
        --draft models/qwen2.5-coder-0.5b.gguf --rounds 5 --json serve-bench.json --markdown serve-bench.md
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

from localspec.bench.suites import load_suite

MODES = ("draft", "lookup", "none")
START_TIMEOUT_S = 600  # loading and calibrating a pair on 2 cores takes under a minute; be generous


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", help="target GGUF (starts a server)")
    p.add_argument("--draft", help="draft GGUF")
    p.add_argument("--url", help="use this running server instead (e.g. http://127.0.0.1:8080)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--prompt", default="edit-refactor", help="prompt id from the suite (default edit-refactor)")
    p.add_argument("--suite", default="default")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=None, help="default: the suite's")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", dest="json_out", help="write the results here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)
    if not args.url and not (args.target and args.draft):
        p.error("give --target and --draft, or --url")
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "localspec",
        "serve",
        "--target",
        args.target,
        "--draft",
        args.draft,
        "--port",
        str(port),
        "--ctx",
        str(args.ctx),
        "--log-level",
        "warning",
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    wait_ready(proc, url)
    return proc, url


def wait_ready(proc: subprocess.Popen, url: str, name: str = "the server") -> None:
    """Until ``url``'s /health answers; SystemExit naming ``name`` if ``proc`` exits first or
    START_TIMEOUT_S pass (then it is terminated)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/health", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"{name} did not answer within {START_TIMEOUT_S} s")


def ask(url: str, body: dict, api_key: str | None) -> tuple[dict, float]:
    """(response, wall seconds) of one non-streamed chat request."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), headers)
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            out = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"the server refused the request: {e.code} {e.read().decode()}") from None
    return out, time.perf_counter() - t0


def measure(url: str, prompt: str, max_tokens: int, rounds: int, api_key: str | None) -> list[dict]:
    """One row per measured request; the warm-up round is left out."""
    rows = []
    for r in range(rounds + 1):
        order = MODES[r % 3 :] + MODES[: r % 3]  # rotate: no mode always runs first
        for mode in order:
            body = {
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens,
                "temperature": 0,
                "speculative": {"type": mode},
            }
            out, wall = ask(url, body, api_key)
            t = out["timings"]
            print(
                f"round {r}{' (warm-up)' if r == 0 else ''} {mode:6s} {t['predicted_n']:4d} tokens "
                f"{t['predicted_per_second'] or 0:7.2f} tok/s  drafted {t['draft_n']:4d} "
                f"accepted {t['draft_n_accepted']:4d}",
                file=sys.stderr,
            )
            if r:
                rows.append(
                    {
                        "round": r,
                        "mode": mode,
                        "wall_s": wall,
                        "text": out["choices"][0]["message"]["content"],
                        **{
                            k: t[k]
                            for k in (
                                "predicted_n",
                                "predicted_per_second",
                                "prompt_n",
                                "cache_n",
                                "draft_n",
                                "draft_n_accepted",
                                "tokens_per_pass",
                                "speed_up",
                            )
                        },
                    }
                )
    return rows


def summarise(rows: list[dict]) -> dict:
    by = {m: [r for r in rows if r["mode"] == m] for m in MODES}
    base = {r["round"]: r for r in by["none"]}
    out = {}
    for mode, rs in by.items():
        drafted = sum(r["draft_n"] for r in rs)
        ratios = [r["predicted_per_second"] / base[r["round"]]["predicted_per_second"] for r in rs]
        out[mode] = {
            "runs": len(rs),
            "tokens": statistics.median(r["predicted_n"] for r in rs),
            "tokens_per_second": statistics.median(r["predicted_per_second"] for r in rs),
            "end_to_end_tokens_per_second": statistics.median(r["predicted_n"] / r["wall_s"] for r in rs),
            "speed_up_vs_none": statistics.median(ratios),
            "speed_up_vs_target_only_estimate": statistics.median(r["speed_up"] or 0 for r in rs),
            "acceptance": sum(r["draft_n_accepted"] for r in rs) / drafted if drafted else None,
            "tokens_per_pass": statistics.median(r["tokens_per_pass"] for r in rs),
            "identical_to_none": all(r["text"] == base[r["round"]]["text"] for r in rs),
        }
    return out


def markdown(summary: dict, prompt_id: str, max_tokens: int) -> str:
    lines = [
        f"Edit request `{prompt_id}` through `localspec serve` (greedy, max_tokens {max_tokens}; "
        "medians of the measured rounds)",
        "",
        "| mode | tokens | tok/s (server) | tok/s (end to end) | speed-up vs none | acceptance | tokens/pass "
        "| same text as none |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, s in summary.items():
        acc = f"{s['acceptance']:.0%}" if s["acceptance"] is not None else "n/a"
        lines.append(
            f"| {mode} | {s['tokens']:.0f} | {s['tokens_per_second']:.2f} | "
            f"{s['end_to_end_tokens_per_second']:.2f} | {s['speed_up_vs_none']:.2f}x | {acc} | "
            f"{s['tokens_per_pass']:.2f} | {'yes' if s['identical_to_none'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    suite = load_suite(args.suite)
    item = next((p for p in suite["prompts"] if p["id"] == args.prompt), None)
    if item is None:
        raise SystemExit(f"no prompt {args.prompt!r} in the suite")
    max_tokens = args.max_tokens or suite.get("max_tokens", 256)
    proc, url = (None, args.url.rstrip("/")) if args.url else start_server(args)
    try:
        rows = measure(url, item["prompt"], max_tokens, args.rounds, args.api_key)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    summary = summarise(rows)
    report = {
        "prompt": args.prompt,
        "max_tokens": max_tokens,
        "rounds": args.rounds,
        "target": args.target,
        "draft": args.draft,
        "summary": summary,
        "runs": [{k: v for k, v in r.items() if k != "text"} for r in rows],
    }
    table = markdown(summary, args.prompt, max_tokens)
    print(table)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
