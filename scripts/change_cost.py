"""What a change of batch size costs a model, timed as a load times it, round by round.

A load times the change on a model that settles (a GPU: ``calibration.time_change``, 18 timed
excesses: a change into 2, 4 and 8 rows and back, three rounds) and counts it only where the
excesses came out above 0 more often than chance would have it (``calibration.dearer``, a sign
test at 1 %). This prints, for each of ``--rounds`` loads' timings, the change a load counts,
the median excess that the load took before the sign test (``max(median, 0)``) and how many of
the 18 excesses were above 0.

On a CPU, where a model does not settle, ``--settle`` times it as a GPU's would be: there a
change costs nothing, so what it reads is noise (and cache effects); on a GPU (CUDA, Metal), it
is what the load would keep in the profile.

  python scripts/change_cost.py MODEL.gguf [--rounds 5] [--settle] [--gpu-layers -1]
"""

from __future__ import annotations

import argparse
import statistics

from localspec.core import calibration
from localspec.llama.backend import GPU_SETTLE, LlamaModel


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--settle", action="store_true", help="time it as on a GPU even where the model does not settle")
    p.add_argument("--gpu-layers", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    model = LlamaModel.load(args.model, n_ctx=1024, threads=args.threads, gpu_layers=args.gpu_layers)
    if args.settle:
        model.settle = model.settle or GPU_SETTLE
    if not model.settle:
        raise SystemExit(f"{args.model}: this model does not settle (a CPU): a load times no change; add --settle")
    t1 = statistics.median(calibration.time_one(model, [1], 0) for _ in range(5))
    print(f"T(1) {t1 * 1e3:.2f} ms")
    for i in range(args.rounds):
        excess = calibration.change_excess(model)
        counted, raw = calibration.counted_change(excess), max(statistics.median(excess), 0.0)
        above = sum(e > 0 for e in excess)
        print(
            f"round {i + 1}: counted {counted / t1:.2f} T(1); max(median, 0) {raw / t1:.2f} T(1); "
            f"{above} of {len(excess)} above 0",
            flush=True,
        )


if __name__ == "__main__":
    main()
