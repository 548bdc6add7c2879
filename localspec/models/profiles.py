"""What each model costs on this machine, kept between runs: the pair menu and ``localspec
doctor`` say what would pay here before the user waits for a load.

A profile belongs to one model file (path, size, modification time), one llama.cpp build and
one machine (CPU model, cores, threads, GPU layers): a change of any of them is another
profile, since the costs change with it. Each holds the verify curve T(n) the engine measured
(calibration at load, refined by every verify), the time of one pass of the model as a draft,
and what use measured with each way of drafting for it (tokens, decode seconds, drafted and
accepted tokens). Expected figures are computed from these and labelled with the date.

The file is JSON in the data dir; a damaged one is set aside (``profiles.json.bad-...``) and
started again: profiles are measurements, they come back with use. The app, ``run``, ``serve`` and
``bench`` may update it at once: an update holds the file's lock (``lockedfile``) from its read to
its atomic write. A read is parsed again only when the file changed, so asking for a profile at
each reply costs a ``stat`` of the file, not a parse of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path

import numpy as np

from ..core.costs import CostModel, speeds
from ..core.estimates import prior_from
from ..core.options import DEFAULT_DRAFT_MAX
from ..core.policy import DEFAULT as DEFAULT_POLICY
from ..lockedfile import file_version, locked, write_atomic

PROFILES_FILE = "profiles.json"  # in the data dir
ASSUMED_ALPHA = DEFAULT_POLICY.prior_alpha  # an untried pair: the controller's own prior
# Tuning choice: a profile's curve and draft pass are the median of the last this many loads'
# measurements, so one load on a busy machine (a build beside it) is outvoted by the next two.
HISTORY = 5
# what a file that is there but cannot be read as profiles raises on the way in
_DAMAGED = (OSError, ValueError, TypeError, KeyError, AttributeError)


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
    rejected: int = 0  # drafting steps that stopped short of their draft (the acceptance's failures)
    replies: int = 0  # replies that ended (their tokens: a reply's usual length, ``reading``)

    @property
    def tokens_per_second(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 and self.tokens else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def prior(self) -> float | None:
        """The acceptance prior this use gives the controller; None before any
        drafting was counted (older profiles counted no rejections: none then either)."""
        return prior_from(self.accepted, self.rejected) if self.rejected else None

    def __add__(self, other: Use) -> Use:
        return Use(*(a + b for a, b in zip(astuple(self), astuple(other))))


@dataclass
class Profile:
    model: str
    measured: str  # ISO date of the last update
    verify: dict[int, float] = field(default_factory=dict)  # T(n), seconds
    draft_pass: float | None = None  # seconds of one pass as a draft model
    use: dict[str, Use] = field(default_factory=dict)
    # the last HISTORY loads' measurements, of which verify and draft_pass are the medians
    verify_history: dict[int, list[float]] = field(default_factory=dict)
    draft_pass_history: list[float] = field(default_factory=list)
    # seconds a change of batch size adds (``calibration.time_change``), where loads measured one (a GPU)
    change_history: list[float] = field(default_factory=list)

    @property
    def change(self) -> float | None:
        return float(np.median(self.change_history)) if self.change_history else None

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
    """Expected speed of ``target`` with drafting ``how`` ('none', 'lookup', 'mtp' or a draft's path):
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
    # the engine's own reading
    rates = speeds(CostModel(target.verify, draft.draft_pass), ASSUMED_ALPHA, DEFAULT_DRAFT_MAX)
    best = float(max(rates.max(), alone))
    return Expected(best / alone, best, f"cost model, assumed acceptance {ASSUMED_ALPHA:.0%}", target.measured)


class ProfileStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.warning: str | None = None
        # the file's version (see lockedfile.file_version) when it was last read, and its profiles as JSON
        self._read_as: tuple[tuple[int, ...], dict] | None = None

    def load(self) -> dict[str, Profile]:
        """Every profile; {} for a missing file. A damaged one is set aside under the lock, so a
        file another process has just written whole is never the one moved away."""
        return {k: _profile(v) for k, v in self._raw().items()}

    def get(self, key: str) -> Profile | None:
        """The profile kept under ``key``, None when there is none (see ``_read``: no parse when
        the file is as it was)."""
        raw = self._raw().get(key)
        return _profile(raw) if raw is not None else None

    def _raw(self) -> dict:
        """The profiles as the file holds them, each checked to read as a Profile; {} for a missing file."""
        try:
            return self._read()
        except FileNotFoundError:
            return {}
        except _DAMAGED as e:
            try:
                with locked(self.path):
                    return self._raw_locked()
            except OSError as why:  # no lock to be had (a read-only dir, a stuck holder): touch nothing
                self.warning = f"{self.path}: unreadable ({e}); left as it is ({why})"
                return {}

    def _read(self) -> dict:
        """``_raw`` without the lock, parsed again only when the file is another version than the
        one read last: another process's update is seen at the next read. Only reads use what
        it keeps; an update reads the file afresh under the lock (``_load_locked``)."""
        version = file_version(self.path)
        if self._read_as is None or self._read_as[0] != version:
            self._read_as = (version, _checked(self.path.read_text(encoding="utf-8")))
        return self._read_as[1]

    def _raw_locked(self) -> dict:
        """``_raw``, the lock already held: read again, and set the file aside if it is still damaged."""
        try:
            return _checked(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except _DAMAGED as e:
            backup = self.path.with_name(f"{self.path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
            try:
                os.replace(self.path, backup)
                self.warning = f"{self.path}: unreadable ({e}); set aside as {backup}, measuring again"
            except OSError:
                self.warning = f"{self.path}: unreadable ({e})"
            return {}

    def _load_locked(self) -> dict[str, Profile]:
        """load(), the lock already held, from the file as it is now."""
        return {k: _profile(v) for k, v in self._raw_locked().items()}

    def update(
        self,
        key: str,
        model: Path,
        verify: Mapping[int, float] | None = None,
        draft_pass: float | None = None,
        use: Mapping[str, Use] | None = None,
        amend: bool = False,
        change: float | None = None,
    ) -> Profile:
        """Add a load's curve, draft pass and change of batch size to the history (the profile's are their medians:
        ``HISTORY``), or with ``amend`` replace the newest entry (the same load, measured
        longer); add use to use. The lock is held from the read to the write, so an update
        from another process is never lost."""
        with locked(self.path):
            profiles = self._load_locked()
            p = self._updated(profiles.get(key) or Profile(str(model), ""), verify, draft_pass, use, amend)
            if change:
                p.change_history = _history(p.change_history, float(change), amend)
            profiles[key] = p
            self._write_locked(profiles)
        return p

    def adopt(self, old: str, key: str) -> None:
        """Move the profile kept under ``old`` to ``key``, merged with what ``key`` holds (the
        use added up, the histories joined, the older first): one load known by two keys. Older
        versions keyed automatic threads as ``tNone`` where ``run`` gave the count, so the app
        and ``run`` kept two histories of the same load; ``Session`` adopts the old key."""
        if old == key or old not in self._raw():
            return
        with locked(self.path):
            profiles = self._load_locked()
            before = profiles.pop(old, None)
            if before is None:
                return
            profiles[key] = _merged(before, profiles.get(key))
            self._write_locked(profiles)

    def _write_locked(self, profiles: Mapping[str, Profile]) -> None:
        """Write every profile at once (the caller holds the lock)."""
        write_atomic(self.path, json.dumps({k: asdict(v) for k, v in profiles.items()}, indent=1))

    @staticmethod
    def _updated(
        p: Profile,
        verify: Mapping[int, float] | None,
        draft_pass: float | None,
        use: Mapping[str, Use] | None,
        amend: bool = False,
    ) -> Profile:
        p.measured = time.strftime("%Y-%m-%d")
        if verify:
            for n, t in verify.items():
                p.verify_history[int(n)] = _history(_verify_history(p, int(n)), float(t), amend)
            p.verify = {n: float(np.median(ts)) for n, ts in p.verify_history.items()}
        if draft_pass:
            p.draft_pass_history = _history(_draft_history(p), float(draft_pass), amend)
            p.draft_pass = float(np.median(p.draft_pass_history))
        for how, u in (use or {}).items():
            p.use[how] = p.use.get(how, Use()) + u
        return p


def _merged(older: Profile, newer: Profile | None) -> Profile:
    """``older``'s measurements and use, then ``newer``'s (the last HISTORY of each history)."""
    if newer is None:
        return older
    p = Profile(newer.model, max(older.measured, newer.measured))
    for n in sorted({*older.verify, *older.verify_history, *newer.verify, *newer.verify_history}):
        p.verify_history[n] = [*_verify_history(older, n), *_verify_history(newer, n)][-HISTORY:]
    p.verify = {n: float(np.median(ts)) for n, ts in p.verify_history.items()}
    p.draft_pass_history = [*_draft_history(older), *_draft_history(newer)][-HISTORY:]
    p.draft_pass = float(np.median(p.draft_pass_history)) if p.draft_pass_history else None
    p.change_history = [*older.change_history, *newer.change_history][-HISTORY:]
    for how in set(older.use) | set(newer.use):
        p.use[how] = older.use.get(how, Use()) + newer.use.get(how, Use())
    return p


def _checked(text: str) -> dict:
    """The file's JSON, every entry read as a Profile once so that a damaged one is found here."""
    raw = json.loads(text)
    for v in raw.values():
        _profile(v)
    return raw


def _verify_history(p: Profile, n: int) -> list[float]:
    """T(n)'s history, or its one value in a profile older than histories."""
    return p.verify_history.get(n) or ([p.verify[n]] if n in p.verify else [])


def _draft_history(p: Profile) -> list[float]:
    return p.draft_pass_history or ([p.draft_pass] if p.draft_pass else [])


def _history(before: list[float], value: float, amend: bool) -> list[float]:
    """The last HISTORY measurements with ``value`` added, or in place of the newest."""
    return [*(before[:-1] if amend and before else before), value][-HISTORY:]


def _profile(raw: dict) -> Profile:
    return Profile(
        model=str(raw["model"]),
        measured=str(raw.get("measured", "")),
        verify={int(n): float(t) for n, t in raw.get("verify", {}).items()},
        draft_pass=float(raw["draft_pass"]) if raw.get("draft_pass") else None,
        use={how: Use(**u) for how, u in raw.get("use", {}).items()},
        verify_history={int(n): [float(t) for t in ts] for n, ts in raw.get("verify_history", {}).items()},
        draft_pass_history=[float(t) for t in raw.get("draft_pass_history", [])],
        change_history=[float(t) for t in raw.get("change_history", [])],
    )


def seeded_change(own: float, profile: Profile | None) -> float:
    """What a change of batch size costs: the median of this load's measurement and the earlier
    loads' (the profile's), so one load timed in a burst is outvoted; 0 where nothing settles."""
    kept = profile.change_history if profile else []
    return float(np.median([own, *kept])) if own and kept else own


@dataclass(frozen=True)
class PairOption:
    target: str
    how: str  # 'none', 'lookup' or the draft's path
    expected: Expected


def options_here(profiles: Mapping[str, Profile], machine: str) -> list[PairOption]:
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
                out.append(PairOption(p.model, how, e))
    return out


def recommend(options: list[PairOption]) -> str | None:
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


def describe(o: PairOption) -> str:
    target = Path(o.target).name
    if o.how == "none":
        return f"{target} alone"
    if o.how == "lookup":
        return f"{target} with prompt lookup"
    if o.how == "mtp":
        return f"{target} with its own MTP layers"
    return f"{target} with the draft {Path(o.how).name}"


MTP_KEY = "mtp|"  # before a target's key: its own MTP layers' profile (their pass as a draft)


def find(profiles: Mapping[str, Profile], path: Path, machine: str, kind: str = "") -> Profile | None:
    """The newest profile of this model file on this machine, whatever its threads and GPU
    layers (the pair menu shows what was measured, not what will be chosen); ``kind=MTP_KEY``:
    the file's MTP layers' profile."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    prefix = f"{kind}{Path(path).resolve()}|{st.st_size}|{st.st_mtime_ns}|{machine}|"
    found = [p for k, p in profiles.items() if k.startswith(prefix)]
    return max(found, key=lambda p: p.measured) if found else None


def menu_line(
    profiles: Mapping[str, Profile], machine: str, target: Path, draft: Path | None, mtp: bool = False
) -> str | None:
    """'expected here: draft 1.62× · 9.8 tok/s · lookup not measured yet · none 6.1 tok/s
    (measured 2026-12-01)' for a pair on disk, or None when its target was never loaded here;
    ``mtp``: the target's MTP layers are offered too."""
    t = find(profiles, target, machine)
    if t is None or not t.alone_tps:
        return None
    parts = []
    if mtp:
        e = expected(t, "mtp", find(profiles, target, machine, MTP_KEY))
        parts.append(f"mtp {e.speedup:.2f}× · {e.tokens_per_second:.1f} tok/s" if e else "mtp not measured yet")
    if draft is not None:
        e = expected(t, str(Path(draft).resolve()), find(profiles, draft, machine))
        parts.append(f"draft {e.speedup:.2f}× · {e.tokens_per_second:.1f} tok/s" if e else "draft not measured yet")
    e = expected(t, "lookup")
    parts.append(f"lookup {e.speedup:.2f}× · {e.tokens_per_second:.1f} tok/s" if e else "lookup not measured yet")
    parts.append(f"none {t.alone_tps:.1f} tok/s")
    return f"expected here: {' · '.join(parts)} (measured {t.measured})"
