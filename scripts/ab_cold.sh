#!/usr/bin/env bash
# Interleaved cold runs of two checkouts' auto mode beside fixed k = 4, on one prompt of a suite:
# each round runs `localspec run` in a fresh process from checkout A, then B, then A with
# `--no-adapt --draft-max 4 --p-min 0`, so drift moves all three alike. Each configuration keeps
# its own data dir, a copy of DATA (a returning user's profile; an empty dir for none); with
# FRESH=1 every run starts from an empty one (a first-time user: no profile, no prior).
#
#   scripts/ab_cold.sh /tmp/wt-before /tmp/wt-after heldout held-explain-hash 5 [DATA]
#
# The input is the suite's prompt with no trailing newline, as the bench gives it. Prints one
# line a run (prompt, label, tok/s, steps, drafted, draft length, tokens a pass, a digest of the
# text), then the medians and the paired ratios. The pair: the F16 one in ./models of the checkout
# it is run from (`../shared/fixtures/fetch-models models --f16`), or TARGET= and DRAFT=; the
# interpreter: ./.venv/bin/python, or PYTHON=. Keep the machine quiet.
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,13p "$0"; exit 2; }
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd) suite=$3 id=$4 rounds=$5 data=${6:-}
root=$(pwd) py=${PYTHON:-$(pwd)/.venv/bin/python}
target=${TARGET:-$root/models/qwen2.5-coder-1.5b-f16.gguf} draft=${DRAFT:-$root/models/qwen2.5-coder-0.5b.gguf}
work=$(mktemp -d) out=$work/runs.txt
trap 'rm -rf "$work"' EXIT
prompt=$("$py" -c "
from localspec.bench import suites
prompts = {p['id']: p['prompt'] for p in suites.load_suite('$suite')['prompts']}
print(prompts['$id'], end='')")
for d in A B F; do
    mkdir -p "$work/$d"
    if [ -n "$data" ]; then cp -r "$data/." "$work/$d/"; fi
done

one() { # checkout, data dir, label, flags...
    local wt=$1 dd=$2 label=$3; shift 3
    if [ -n "${FRESH:-}" ]; then dd=$(mktemp -d -p "$work"); fi
    (cd "$wt" && printf "%s" "$prompt" | LOCALSPEC_DATA_DIR=$dd "$py" -m localspec run --json \
        --target "$target" --draft "$draft" --max-tokens 96 --temp 0 "$@" - 2>/dev/null) |
        "$py" -c "
import hashlib, json, sys
o = json.loads(sys.stdin.read())
print('$id', '$label', round(o['tokens_per_second'], 2), o['n_steps'], o['n_drafted'],
      round(o['draft_length'], 2), round(o['tokens_per_pass'], 2), hashlib.md5(o['text'].encode()).hexdigest()[:8])" |
        tee -a "$out"
}
for _ in $(seq "$rounds"); do
    one "$a" "$work/A" A
    one "$b" "$work/B" B
    one "$a" "$work/F" fixed --no-adapt --draft-max 4 --p-min 0
done
"$py" - "$out" <<'EOF'
import statistics as st, sys
runs = [line.split() for line in open(sys.argv[1])]
tps = {label: [float(r[2]) for r in runs if r[1] == label] for label in ("A", "B", "fixed")}
med = {label: st.median(v) for label, v in tps.items()}
paired = lambda x, y: st.median(p / q for p, q in zip(tps[x], tps[y]))
print(f"median tok/s: A {med['A']:.2f}, B {med['B']:.2f}, fixed k=4 {med['fixed']:.2f}")
print(f"A / fixed {med['A'] / med['fixed']:.2f} (paired {paired('A', 'fixed'):.2f}); "
      f"B / fixed {med['B'] / med['fixed']:.2f} (paired {paired('B', 'fixed'):.2f}); B / A paired {paired('B', 'A'):.2f}")
print(f"texts: {len({r[7] for r in runs})} distinct over {len(runs)} runs")
EOF
