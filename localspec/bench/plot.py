"""SVG plots of a ``localspec bench --json`` report, written by hand (no plotting library).

Two plots for the regime of one report (its target file):

- ``<target>-curve.svg``: the cost curve T(k)/T(1), the time of one target evaluation of k
  tokens over that of one, as the engine holds it (calibrated at load, refined by every
  verify) beside the direct measurement at the end of the run;
- ``<target>-speedup.svg``: each mode's speed-up on each prompt (tok/s ÷ the target alone's
  tok/s on the same prompt, in the same run), a group of bars per prompt, a dashed line at 1.0.

Only the report's JSON is read, so a saved report can be drawn again at any time:
``localspec bench --plot RESULTS.json --out docs/plots``. A piece the report lacks (no curve,
no speed-ups) is a plot not written.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from xml.sax.saxutils import escape

HEIGHT = 460
MIN_WIDTH = 720
LEFT, RIGHT, TOP, BOTTOM = 64, 170, 64, 150  # the plot area's margins; the legend sits on the right
MIN_BAR = 10  # pixels: a bar's value is written along it, 8 pixels high
NOTE_CHARS = 5.6  # pixels per character of the 10-pixel footnote, to wrap it
# tab20's colours, strong then light: a sweep has 11 bar modes (draft and 10 fixed), more with lookup
COLOURS = (
    *("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"),
    *("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"),
)
SPEEDUP_RULE = "speed-up = tok/s ÷ target-alone tok/s in the same run"
Series = list[tuple[int, float]]


def write_plots(report: dict, out_dir: Path) -> list[Path]:
    """Draw what ``report`` holds into ``out_dir`` (created if missing); the files written,
    named after the target file (``-cold`` added for a ``--cold`` report)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(report.get("target") or "bench").name.removesuffix(".gguf") + ("-cold" if report.get("cold") else "")
    written = []
    for suffix, svg in (("curve", curve_svg(report)), ("speedup", speedup_svg(report))):
        if svg is not None:
            path = out_dir / f"{stem}-{suffix}.svg"
            path.write_text(svg, encoding="utf-8")
            written.append(path)
    return written


# --- what the report holds ------------------------------------------------------------------


def curve_series(report: dict) -> dict[str, Series]:
    """{'engine': [(k, T(k)/T(1)), ...], 'direct': [...]}; only 'direct' where the report has
    the direct curve alone (``cost_curve``); empty where it has neither."""
    ratios = (report.get("engine_curve") or {}).get("ratios") or {}
    if ratios:
        points = sorted((int(k), v) for k, v in ratios.items())
        series = {name: [(k, v.get(name)) for k, v in points] for name in ("engine", "direct")}
    else:
        direct = (report.get("cost_curve") or {}).get("verify_ratio") or {}
        series = {"direct": sorted((int(k), v) for k, v in direct.items())}
    clean = {name: [(k, float(v)) for k, v in pts if _finite(v)] for name, pts in series.items()}
    return {name: pts for name, pts in clean.items() if pts}


def speedups(report: dict) -> tuple[list[str], list[str], dict[tuple[str, str], float]]:
    """Prompts and modes in the order they ran, and each (prompt, mode)'s speed-up. The target
    alone ('none') is the dashed line, not a bar; a mode is 'mode @T' when temperatures differ."""
    if report.get("cold"):
        found = [
            (r["prompt_id"], config, r.get("temperature"), r.get(key))
            for r in report.get("rows", [])
            for config, key in (("auto", "auto_over_target"), ("fixed k=4", "fixed_over_target"))
        ]
    else:
        found = [(r["prompt_id"], r["mode"], r.get("temperature"), r.get("speedup")) for r in report.get("rows", [])]
    found = [f for f in found if f[1] != "none" and _finite(f[3])]
    several = len({f[2] for f in found}) > 1
    values = {(p, f"{m} @{t:g}" if several else m): float(v) for p, m, t, v in found}
    prompts = list(dict.fromkeys(p for p, _ in values))
    modes = list(dict.fromkeys(m for _, m in values))
    return prompts, modes, values


def names(report: dict) -> str:
    """'target.gguf + draft.gguf'."""
    target = Path(report.get("target") or "?").name
    return f"{target} + {Path(report['draft']).name}" if report.get("draft") else target


def subtitle(report: dict) -> str:
    """The pair, and the machine where the report names it (``--cold`` does) and its offload."""
    m = report.get("machine") or {}
    cpu = f"{m['cpu']} ({m.get('cpu_count', '?')} CPUs)" if m.get("cpu") else ""
    return " · ".join(filter(None, (names(report), cpu, report.get("offload") or "")))


def provenance(report: dict) -> str:
    """How the report was made: its command where it has one (``--cold``), else what the warm
    bench records of it (its JSON holds no command line)."""
    if report.get("command"):
        return f"measured by `{report['command']}`"
    get = lambda key: report.get(key, "?")
    return (
        f"measured by `localspec bench` on {names(report)}: suite {get('suite')}, "
        f"{get('max_tokens')} tokens, {get('repeats')} interleaved repeat(s)"
    )


# --- drawing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """The plot area of a ``width`` × HEIGHT picture: data (x, y) to pixels."""

    width: int
    x_lo: float
    x_hi: float
    y_hi: float

    def x(self, v: float) -> float:
        span = (self.width - LEFT - RIGHT) / max(self.x_hi - self.x_lo, 1e-9)
        return LEFT + (v - self.x_lo) * span

    def y(self, v: float) -> float:
        return TOP + (1 - v / self.y_hi) * (HEIGHT - TOP - BOTTOM)


def curve_svg(report: dict) -> str | None:
    series = curve_series(report)
    if not series:
        return None
    ks = [k for pts in series.values() for k, _ in pts]
    frame = Frame(MIN_WIDTH, min(ks), max(ks), _top(max(v for pts in series.values() for _, v in pts)))
    body = _axes(frame, "k: tokens in one target evaluation (a verify of k − 1 draft tokens)", "T(k) / T(1)")
    body += [_tick_x(frame, k, f"{k:g}") for k in sorted(set(ks))]
    guessed = unmeasured(report)
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        xy = " ".join(f"{frame.x(k):.1f},{frame.y(v):.1f}" for k, v in pts)
        body.append(f'<polyline class="line" points="{xy}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for k, v in pts:
            hollow = name == "engine" and k in guessed
            tip = f"{name}: T({k:g})/T(1) = {v:.2f}" + (
                " (never measured by the engine: extrapolated)" if hollow else ""
            )
            body.append(_point(frame, k, v, colour, tip, hollow))
        body.append(_legend(frame, i, name, colour))
    notes = [provenance(report), _curve_meaning(report, bool(guessed))]
    return _document(frame.width, "Cost curve T(k)/T(1)", subtitle(report), body, notes)


def speedup_svg(report: dict) -> str | None:
    prompts, modes, values = speedups(report)
    if not values:
        return None
    width = max(MIN_WIDTH, LEFT + RIGHT + len(prompts) * (MIN_BAR * len(modes) + 16))
    frame = Frame(width, 0, len(prompts), _top(max(values.values())))
    slot = frame.x(1) - frame.x(0)
    bar = min(28.0, (slot - 16) / len(modes))
    body = _axes(frame, "", "speed-up (× the target alone)")
    body.append(_baseline(frame))
    for p, prompt in enumerate(prompts):
        x0 = frame.x(p) + (slot - bar * len(modes)) / 2
        body.append(_label_x(x0 + bar * len(modes) / 2, prompt))
        for m, mode in enumerate(modes):
            if (prompt, mode) in values:
                colour = COLOURS[m % len(COLOURS)]
                body += _bar(frame, x0 + m * bar, bar, values[prompt, mode], colour, f"{prompt}, {mode}")
    body += [_legend(frame, m, mode, COLOURS[m % len(COLOURS)]) for m, mode in enumerate(modes)]
    rule = f"{SPEEDUP_RULE}; dashed line: the target alone (1.0)."
    if report.get("cold"):
        rule = f"cold: every reply a fresh `localspec run`; {SPEEDUP_RULE} (medians); dashed line: 1.0."
    return _document(frame.width, "Speed-up by prompt and mode", subtitle(report), body, [provenance(report), rule])


def unmeasured(report: dict) -> set[int]:
    """Sizes the engine never verified in the run: its figure there is extrapolated."""
    ratios = (report.get("engine_curve") or {}).get("ratios") or {}
    return {int(k) for k, v in ratios.items() if v.get("engine_samples") == 0}


def _curve_meaning(report: dict, guessed: bool) -> str:
    curve = report.get("engine_curve") or {}
    t1, draft = curve.get("direct_t1"), curve.get("direct_draft_seconds")
    costs = f" Direct T(1) = {1000 * t1:.1f} ms." if _finite(t1) else ""
    if _finite(t1) and _finite(draft):
        costs = f"{costs[:-1]}; a draft pass = {draft / t1:.2f} T(1)."
    hollow = " Hollow points: sizes the engine never verified (extrapolated)." if guessed else ""
    return (
        "engine: calibrated at load, refined by every verify of the run; direct: measured after the run "
        f"(200 cached tokens, median of 5).{costs}{hollow}"
    )


def _document(width: int, title: str, sub: str, body: list[str], notes: list[str]) -> str:
    """The picture: ``title`` (the plot's <title>, with ``sub``), ``body``, the footnote ``notes``
    wrapped to the width (and repeated as the <desc>)."""
    lines = [ln for n in notes for ln in textwrap.wrap(n, int((width - 16) / NOTE_CHARS))]
    foot = [
        f'<text class="note" x="8" y="{HEIGHT - 10 - 13 * (len(lines) - 1 - i)}" font-size="10" fill="#444">'
        f"{escape(ln)}</text>"
        for i, ln in enumerate(lines)
    ]
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
            f'viewBox="0 0 {width} {HEIGHT}" font-family="sans-serif" font-size="12">',
            f"<title>{escape(f'{title}: {sub}')}</title>",
            f"<desc>{escape(' '.join(notes))}</desc>",
            f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
            f'<text class="title" x="{LEFT}" y="22" font-size="15" font-weight="bold">{escape(title)}</text>',
            f'<text class="subtitle" x="{LEFT}" y="40" fill="#444">{escape(sub)}</text>',
            *body,
            *foot,
            "</svg>",
            "",
        ]
    )


def _axes(frame: Frame, x_label: str, y_label: str) -> list[str]:
    x0, x1, y0, y1 = LEFT, frame.width - RIGHT, HEIGHT - BOTTOM, TOP
    out = [f'<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="black"/>']
    for v in _ticks(frame.y_hi):
        y = frame.y(v)
        out.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 7}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    if x_label:
        out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y0 + 34}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="16" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(y0 + y1) / 2:.1f})">{escape(y_label)}</text>'
    )
    return out


def _tick_x(frame: Frame, v: float, label: str) -> str:
    return f'<text x="{frame.x(v):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{escape(label)}</text>'


def _label_x(x: float, label: str) -> str:
    y = HEIGHT - BOTTOM + 12
    return f'<text x="{x:.1f}" y="{y}" text-anchor="end" transform="rotate(-35 {x:.1f} {y})">{escape(label)}</text>'


def _point(frame: Frame, x: float, y: float, colour: str, tip: str, hollow: bool = False) -> str:
    cx, cy = frame.x(x), frame.y(y)
    paint = f'fill="white" stroke="{colour}" stroke-width="1.5"' if hollow else f'fill="{colour}"'
    return f'<circle class="point" cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" {paint}><title>{escape(tip)}</title></circle>'


def _bar(frame: Frame, x: float, width: float, value: float, colour: str, what: str) -> list[str]:
    """A bar from 0 to ``value``, its value written above it (turned along a bar too narrow for it)."""
    top, base = frame.y(value), frame.y(0)
    cx, ty = x + width / 2, top - 4
    turn = f' transform="rotate(-90 {cx:.1f} {ty:.1f})"' if width < 22 else ""
    anchor = "start" if turn else "middle"
    return [
        f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{width - 1:.1f}" height="{base - top:.1f}" '
        f'fill="{colour}"><title>{escape(what)}: {value:.2f}×</title></rect>',
        f'<text class="value" x="{cx:.1f}" y="{ty + (3 if turn else 0):.1f}" font-size="{8 if turn else 9}" '
        f'text-anchor="{anchor}"{turn}>{value:.2f}</text>',
    ]


def _baseline(frame: Frame) -> str:
    y = frame.y(1.0)
    ends = f'x1="{LEFT}" y1="{y:.1f}" x2="{frame.width - RIGHT}" y2="{y:.1f}"'
    return f'<line class="baseline" {ends} stroke="black" stroke-dasharray="6 4"/>'


def _legend(frame: Frame, i: int, name: str, colour: str) -> str:
    x, y = frame.width - RIGHT + 14, TOP + 18 * i
    return (
        f'<g class="legend"><rect x="{x}" y="{y}" width="12" height="12" fill="{colour}"/>'
        f'<text x="{x + 18}" y="{y + 10}">{escape(name)}</text></g>'
    )


def _ticks(hi: float) -> list[float]:
    """Round steps from 0 to ``hi``, about five of them."""
    raw = hi / 5
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 2.5, 5, 10)), key=lambda s: abs(s - raw))
    return [round(i * step, 6) for i in range(int(hi / step + 1e-9) + 1)]


def _top(v: float) -> float:
    """The y axis's top: a little above the highest value, and never below 1.2 (the 1.0 line)."""
    return max(1.2, v * 1.12)


def _finite(v: object) -> TypeGuard[float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
