"""What each model costs on this machine, kept between runs: the pair menu and ``localspec
doctor`` say what would pay here before the user waits for a load.

A profile belongs to one model file (path, size, modification time), one llama.cpp build and
one machine (CPU model, cores, threads, GPU layers): a change of any of them is another
profile, since the costs change with it. Each holds the verify curve T(n) the engine measured
(calibration at load, refined by every verify), the time of one pass of the model as a draft,
and what use measured with each way of drafting for it (tokens, decode seconds, drafted and
accepted tokens). Expected figures are computed from these and labelled with the date.

The file is JSON in the data dir; a damaged one is set aside (``profiles.json.bad-...``) and
started again: profiles are measurements, they come back with use.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .core.controller import PRIOR_ACCEPTED, PRIOR_REJECTED, expected_tokens
from .core.costs import VerifyCurve

PROFILES_FILE = "profiles.json"  # in the data dir
ASSUMED_ALPHA = PRIOR_ACCEPTED / (PRIOR_ACCEPTED + PRIOR_REJECTED)  # a same-family pair, untried
MAX_K = 16


def machine_id(build: str) -> str:
    """This machine and llama.cpp build: CPU model and cores, the build's version and system info."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return hashlib.sha256(f"{cpu}|{os.cpu_count()}|{build}".encode()).hexdigest()[:16]


def model_key(path: Path, machine: str, threads: int | None = None, gpu_layers: int | None = None) -> str:
    """One model file (path, size, modification time) on one machine with one setting of
    threads and GPU layers: each of them changes what a verify costs."""
    st = Path(path).stat()
    return f"{Path(path).resolve()}|{st.st_size}|{st.st_mtime_ns}|{machine}|t{threads}|g{gpu_layers}"


@dataclass
class Use:
    """What replies measured with one way of drafting ('none', 'lookup' or a draft's path)."""

    tokens: int = 0
    seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0

    @property
    def tokens_per_second(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 and self.tokens else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


@dataclass
class Profile:
    model: str
    measured: str  # ISO date of the last update
    verify: dict[int, float] = field(default_factory=dict)  # T(n), seconds
    draft_pass: float | None = None  # seconds of one pass as a draft model
    use: dict[str, Use] = field(default_factory=dict)

    @property
    def alone_tps(self) -> float | None:
        return 1.0 / self.verify[1] if self.verify.get(1) else None


@dataclass(frozen=True)
class Expected:
    """An expected speed here, and what it rests on."""

    speedup: float
    tokens_per_second: float
    basis: str  # "measured in use" | "model, assumed acceptance 75%" | ...
    measured: str  # date

    @property
    def label(self) -> str:
        return f"expected {self.speedup:.2f}× · {self.tokens_per_second:.1f} tok/s ({self.basis}, {self.measured})"


def expected(target: Profile, how: str, draft: Profile | None = None) -> Expected | None:
    """Expected speed of ``target`` with drafting ``how`` ('none', 'lookup' or a draft's path):
    from what use measured when there is any (tokens/s in use against 1 / T(1) measured here),
    else for a draft model from the cost model with an assumed acceptance. None: unknown."""
    alone = target.alone_tps
    if not alone:
        return None
    if how == "none":
        return Expected(1.0, alone, "T(1) measured here", target.measured)
    use = target.use.get(how)
    if use and use.tokens_per_second and use.tokens >= 32:
        return Expected(
            use.tokens_per_second / alone,
            use.tokens_per_second,
            f"measured in use over {use.tokens} tokens",
            target.measured,
        )
    if draft is None or not draft.draft_pass or how == "lookup":
        return None
    ks = np.arange(MAX_K + 1)
    curve = VerifyCurve(target.verify).curve(MAX_K + 1)[1:]  # the engine's own reading of the points
    speeds = expected_tokens(ASSUMED_ALPHA, ks) / (ks * draft.draft_pass + curve)
    best = float(max(speeds.max(), alone))
    return Expected(best / alone, best, f"cost model, assumed acceptance {ASSUMED_ALPHA:.0%}", target.measured)


class ProfileStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.warning: str | None = None

    def load(self) -> dict[str, Profile]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return {k: _profile(v) for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            backup = self.path.with_name(f"{self.path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
            try:
                os.replace(self.path, backup)
                self.warning = f"{self.path}: unreadable ({e}); set aside as {backup}, measuring again"
            except OSError:
                self.warning = f"{self.path}: unreadable ({e})"
            return {}

    def get(self, key: str) -> Profile | None:
        return self.load().get(key)

    def update(
        self,
        key: str,
        model: Path,
        verify: Mapping[int, float] | None = None,
        draft_pass: float | None = None,
        use: Mapping[str, Use] | None = None,
    ) -> Profile:
        """Replace the curve and the draft pass with the newer measurement; add use to use."""
        profiles = self.load()
        p = profiles.get(key) or Profile(str(model), "")
        p.measured = time.strftime("%Y-%m-%d")
        if verify:
            p.verify = {int(n): float(t) for n, t in verify.items()}
        if draft_pass:
            p.draft_pass = float(draft_pass)
        for how, u in (use or {}).items():
            old = p.use.get(how, Use())
            p.use[how] = Use(
                old.tokens + u.tokens, old.seconds + u.seconds, old.drafted + u.drafted, old.accepted + u.accepted
            )
        profiles[key] = p
        self._save(profiles)
        return p

    def _save(self, profiles: dict[str, Profile]) -> None:
        """Atomic (temp file + rename): a crash mid-save leaves the old file whole."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({k: asdict(p) for k, p in profiles.items()}, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)


def _profile(raw: dict) -> Profile:
    return Profile(
        model=str(raw["model"]),
        measured=str(raw.get("measured", "")),
        verify={int(n): float(t) for n, t in raw.get("verify", {}).items()},
        draft_pass=float(raw["draft_pass"]) if raw.get("draft_pass") else None,
        use={how: Use(**u) for how, u in raw.get("use", {}).items()},
    )


@dataclass(frozen=True)
class Option:
    target: str
    how: str  # 'none', 'lookup' or the draft's path
    expected: Expected


def options_here(profiles: Mapping[str, Profile], machine: str) -> list[Option]:
    """Every way to run each target measured on this machine that can be given a figure:
    alone, and with each kind of drafting it was used with."""
    here = {k: p for k, p in profiles.items() if f"|{machine}|" in k}
    drafts = {p.model: p for p in here.values() if p.draft_pass}
    out = []
    for p in here.values():
        if not p.verify:
            continue
        for how in ["none", *sorted(h for h in p.use if h != "none")]:
            e = expected(p, how, drafts.get(how))
            if e:
                out.append(Option(p.model, how, e))
    return out


def recommend(options: list[Option]) -> str | None:
    """One recommendation in plain words, honest about absolute speed: the fastest option,
    and a faster-looking speed-up that is still slower in tokens/s."""
    if not options:
        return None
    best = max(options, key=lambda o: o.expected.tokens_per_second)
    text = f"fastest here: {describe(best)} ({best.expected.tokens_per_second:.1f} tok/s expected)"
    flashy = max(options, key=lambda o: o.expected.speedup)
    if flashy is not best and flashy.expected.speedup > max(best.expected.speedup, 1.05):
        text += (
            f"; {describe(flashy)} speculates at {flashy.expected.speedup:.2f}× but is still slower "
            f"({flashy.expected.tokens_per_second:.1f} tok/s)"
        )
    return text


def describe(o: Option) -> str:
    target = Path(o.target).name
    if o.how == "none":
        return f"{target} alone"
    if o.how == "lookup":
        return f"{target} with prompt lookup"
    return f"{target} with the draft {Path(o.how).name}"


def find(profiles: Mapping[str, Profile], path: Path, machine: str) -> Profile | None:
    """The newest profile of this model file on this machine, whatever its threads and GPU
    layers (the pair menu shows what was measured, not what will be chosen)."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    prefix = f"{Path(path).resolve()}|{st.st_size}|{st.st_mtime_ns}|{machine}|"
    found = [p for k, p in profiles.items() if k.startswith(prefix)]
    return max(found, key=lambda p: p.measured) if found else None


def menu_line(profiles: Mapping[str, Profile], machine: str, target: Path, draft: Path | None) -> str | None:
    """'expected here: draft 1.62× · 9.8 tok/s · lookup not measured yet · none 6.1 tok/s
    (measured 2026-12-01)' for a pair on disk, or None when its target was never loaded here."""
    t = find(profiles, target, machine)
    if t is None or not t.alone_tps:
        return None
    parts = []
    if draft is not None:
        e = expected(t, str(Path(draft).resolve()), find(profiles, draft, machine))
        parts.append(f"draft {e.speedup:.2f}× · {e.tokens_per_second:.1f} tok/s" if e else "draft not measured yet")
    e = expected(t, "lookup")
    parts.append(f"lookup {e.speedup:.2f}× · {e.tokens_per_second:.1f} tok/s" if e else "lookup not measured yet")
    parts.append(f"none {t.alone_tps:.1f} tok/s")
    return f"expected here: {' · '.join(parts)} (measured {t.measured})"
