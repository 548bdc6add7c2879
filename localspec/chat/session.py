"""A loaded target/draft pair and the chat turns run on it. The CLI and the TUI both use this;
widgets hold no model state.

``Session.chat(messages, ...)`` formats the conversation with the target's chat template,
trims the oldest turns if it would not fit, and yields the engine's Steps. Both models keep
their KV caches between turns, so a follow-up turn evaluates only its new tokens.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ..core.calibration import calibrate, recheck
from ..core.costs import MIN_SAMPLES, CostModel
from ..core.engine import SpeculativeEngine, Step, drafts
from ..core.explain import DraftingState, explain
from ..core.modes import Drafting, DraftingMode, ModeContext, ModeRegistry, ReplySpec, builtin_modes
from ..core.modes import repeatable as repeatable_mode
from ..core.options import MAX_DRAFT, DraftOptions, ModelOptions, clamp_threads, usable_cpus, values
from ..core.sampling import SamplingParams
from ..core.suffix import Corpus
from ..llama.compat import Compatibility, check_compatible
from ..llama.offload import CPU_BUILD, OffloadPlan, cpu_plan, plan_offload
from ..models.profiles import MTP_KEY, Profile, ProfileStore, Use, machine_id, model_key, seeded_change
from .prompts import prompt_tokens
from .replies import PastReplies, tokenizer_key

Mode = Literal["draft", "mtp", "lookup", "none"]


class IncompatiblePair(Exception):
    def __init__(self, compat: Compatibility) -> None:
        super().__init__(compat.message())
        self.compat = compat


class ContextOverflow(Exception):
    """The conversation cannot fit the context even after trimming (or trimming is off)."""


@dataclass(frozen=True)
class PairSpec:
    target: Path
    draft: Path | None = None
    lookup: bool = False
    mtp: bool = False  # the target drafts with its own next-token-prediction layers (llama/mtp.py)

    @property
    def mode(self) -> Mode:
        return "draft" if self.draft else "mtp" if self.mtp else "lookup" if self.lookup else "none"

    @property
    def drafter(self) -> str:
        """What drafts, in words: the draft file, the target's MTP layers, or none."""
        if self.draft:
            return Path(self.draft).name
        return "MTP layers (built into the model)" if self.mtp else self.mode


class LoadOptions(ModelOptions, DraftOptions):
    """What a load takes: the model and drafting groups of ``localspec.core.options``, flat
    (``options.n_ctx``, ``options.draft_max``), with their defaults and ranges. The app and the CLI
    build it with :func:`load_options`."""


def load_options(model: ModelOptions, draft: DraftOptions) -> LoadOptions:
    """A load's options from the two groups: the app's settings (a ModelOptions) and their
    ``draft``, or the groups the CLI builds from its flags. The one place either front end
    turns its options into a load, so neither can leave one out."""
    return LoadOptions(**values(model, ModelOptions), **values(draft, DraftOptions))


def offload_plan(spec: PairSpec, options: LoadOptions, backend) -> OffloadPlan:
    """Each model's GPU layers (see ``offload``). A CPU-only build reads no file for it;
    otherwise the layer sizes come from both files' headers and the free memory from ggml."""
    from ..llama import ggufinfo

    if not backend.supports_gpu_offload():
        return cpu_plan(None, None, CPU_BUILD, has_draft=spec.draft is not None)
    target = ggufinfo.read_model_layout(spec.target, options.draft_max)
    draft = ggufinfo.read_model_layout(spec.draft, 0) if spec.draft else None  # a draft keeps no snapshots
    return plan_offload(
        target,
        draft,
        options.n_ctx,
        backend.backend_devices(),
        target_layers=options.gpu_layers,
        draft_layers=options.draft_gpu_layers,
    )


@dataclass(frozen=True)
class ProfileKeys:
    """Where a load's measurements are kept (``profiles.model_key``): the target's profile, and
    the drafter's (a draft file's, or the target's MTP layers'; None when nothing drafts from a
    model)."""

    target: str
    draft: str | None = None


def profile_keys(spec: PairSpec, machine: str, threads: int | None, plan: OffloadPlan | None) -> ProfileKeys:
    """The pair's profile keys with ``threads`` (None: the key an older version gave automatic
    threads). Each stats its model file, so a session takes them once, at load."""
    target = model_key(spec.target, machine, threads, plan.target_layers if plan else None)
    if spec.mtp:
        return ProfileKeys(target, MTP_KEY + target)
    if spec.draft is None:
        return ProfileKeys(target)
    return ProfileKeys(target, model_key(spec.draft, machine, threads, plan.draft_layers if plan else None))


# Tuning choice: verify sizes measured at load (3 rounds, see calibration.calibrate); the others are
# interpolated, then measured when a step verifies them. Sizes past 8 pay only on a
# memory-bound target, where drafts the draft model is sure of run past k and reach them.
CALIBRATION_SIZES = (1, 2, 3, 4, 6, 8)
# The longest verify (a copy of MAX_DRAFT tokens): timed once a load until the profile holds
# MIN_SAMPLES loads' timings of it, then seeded from them. A guess there cannot tell a long
# copy that pays from one that does not (on a compute-bound CPU a row can cost half as much in
# a long batch), and on a flat curve (a GPU) it prices long drafts dearly.
LONGEST_VERIFY = MAX_DRAFT + 1


class Session:
    def __init__(
        self,
        target,
        draft,
        spec: PairSpec,
        options: LoadOptions,
        compat=None,
        offload: OffloadPlan | None = None,
        profiles: ProfileStore | None = None,
        machine: str = "",
        history=None,
    ) -> None:
        self.target = target
        self.draft = draft
        self.profiles = profiles  # where this machine's costs are kept (None: not kept)
        # past replies to draft from, kept by ``history`` (a HistoryStore; None, or the option off: none)
        self.replies = PastReplies(history, tokenizer_key(target)) if history is not None and options.history else None
        self.machine = machine
        self._use: dict[str, Use] = {}  # what replies measured since the last save, by drafting
        self.spec = spec
        self.options = options
        self.compat = compat
        self.offload = offload  # the GPU split the models were loaded with
        self.lock = threading.Lock()  # one generation at a time per pair of caches
        # the files as loaded, named once: a file replaced, moved or deleted while the session
        # runs (a re-download, a moved models folder) must not fail a reply the loaded model can give
        self.profile_keys = profile_keys(spec, machine, self._threads, offload) if profiles is not None else None
        self._draft_path = str(Path(spec.draft).resolve()) if spec.draft else None  # what its use is counted under
        self._adopt_old_keys()
        known = self._verify_history()
        once = () if len(known.get(LONGEST_VERIFY, ())) >= MIN_SAMPLES else (LONGEST_VERIFY,)
        curve, draft_cost = calibrate(target, CALIBRATION_SIZES, draft=draft, once=once)
        # what earlier loads of the pair measured here: a load that met the machine busy is outvoted
        for n, history in known.items():
            for seconds in history:
                curve.seed(n, seconds)
        for seconds in self._draft_history():
            draft_cost.seed(seconds)
        self._change = curve.change  # this load's, for the profile; 0 where nothing settles (a CPU)
        curve.change = seeded_change(curve.change, self._kept("target"))
        self.costs = CostModel(curve, draft_cost)  # the pair's; each mode's controller shares the curve
        self._costs_at_load = CostModel(curve.points(), draft_cost.seconds)  # a copy: seeded replies (modes.repeatable)
        self.modes: ModeRegistry = builtin_modes()  # the bench registers its own beside these
        # by mode, longest draft, and whether it is the seeded replies' (modes.repeatable)
        self._drafting: dict[tuple[DraftingMode, int, bool], Drafting] = {}
        self._saved = False  # this load's measurements are in the profile's history
        self._checked = False  # a reply has started: the calibration's T(1) was checked (calibration.recheck)
        self.save_profile()

    @classmethod
    def load(
        cls,
        spec: PairSpec,
        options: LoadOptions = LoadOptions(),
        progress: Callable[[str], None] | None = None,
        profiles: ProfileStore | None = None,
        check_target: Callable[[object], None] | None = None,
        history=None,
    ) -> Session:
        """Check the files, load both models, check the pair, measure the costs here.
        ``check_target(target)`` runs as soon as the target is loaded (a prompt that cannot
        fit is refused then, not after the draft and the calibration)."""
        from ..llama import backend as backend  # the only adapter that imports llama_cpp
        from ..llama import buildcheck, ggufinfo, preflight
        from ..settings import data_dir

        say = progress or (lambda _msg: None)
        files = list(filter(None, (spec.target, spec.draft)))
        try:
            plan = offload_plan(spec, options, backend)
        except ggufinfo.GgufError:
            preflight.check_model_files(files, options.n_ctx, mtp=spec.mtp, draft_max=options.draft_max)  # clearer
            raise
        # one clear ModelFileError for a missing, foreign, truncated, unsupported or too-large
        # file (the pair's memory summed) before llama.cpp touches either file
        layers = [plan.target_layers, plan.draft_layers][: len(files)]
        preflight.check_model_files(files, options.n_ctx, layers, mtp=spec.mtp, draft_max=options.draft_max)
        say(plan.summary)
        # a build that would crash on the first batched decode stops here, with the fix (checked once a build)
        buildcheck.require_runnable(data_dir() / buildcheck.CHECK_FILE, say)
        say(f"loading target {spec.target.name}")
        # a hybrid target (Qwen3.5's delta-net layers) keeps states to roll back a whole draft
        snapshots = ggufinfo.snapshots_for(ggufinfo.state_bytes(spec.target), options.draft_max)
        target = backend.LlamaModel.load(
            spec.target, options.n_ctx, options.threads, plan.target_layers, snapshots=snapshots, mtp=spec.mtp
        )
        if check_target is not None:  # e.g. the prompt fits: say so before the draft loads
            try:
                check_target(target)
            except BaseException:
                target.close()
                raise
        try:
            draft, compat = _load_drafter(spec, target, options, plan, say)
        except BaseException:
            target.close()
            raise
        say("measuring verify costs on this machine")
        build = backend.build_info()
        machine = machine_id(f"{build.get('llama_cpp_python')}|{build.get('system_info')}")
        return cls(target, draft, spec, options, compat, plan, profiles, machine, history)

    # --- what the UI shows -------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @property
    def baseline_tokens_per_second(self) -> float:
        """Target-only decode speed predicted from the measured single-token evaluation time."""
        return 1.0 / self.costs.T(1)

    baseline_note = "1 / T(1): median of recent single-token target evaluations"

    @functools.cached_property
    def opens_thinking(self) -> bool:
        """Whether the chat template opens a <think> block itself (Qwen3's with thinking on
        end the generation prompt with it): the reply then starts inside the thinking."""
        try:
            prompt = self.target.apply_chat_template([{"role": "user", "content": "hi"}])
        except Exception:
            return False
        return prompt.rstrip().endswith("<think>")

    def token_text(self, token: int) -> str:
        return self.target.token_bytes(token).decode("utf-8", errors="replace")

    # --- generation --------------------------------------------------------------------
    def engine(
        self,
        mode: Mode | str | None = None,
        draft_max: int | None = None,
        p_min: float | None = None,
        prompt_len: int = 0,
        repeatable: bool = False,
    ) -> SpeculativeEngine:
        """The engine for ``mode`` (a name in ``self.modes``; default: the pair's). ``draft_max``
        and ``p_min`` replace the options' longest draft and draft confidence for this engine
        (a server request's ``speculative.draft_max`` / ``.p_min``); ``prompt_len`` is the reply's
        prompt (the bench's oracle replays what follows it). ``repeatable``: draft lengths that
        follow no timing, so a seeded sampled reply repeats (``modes.repeatable``)."""
        drafting = self.drafting(mode, draft_max, repeatable)
        reply = ReplySpec(prompt_len, self.options.p_min if p_min is None else p_min)
        return drafting.engine(self.target, reply)

    def drafting(
        self, mode: Mode | str | None = None, draft_max: int | None = None, repeatable: bool = False
    ) -> Drafting:
        """The state of ``mode`` at longest draft ``draft_max`` (default: the options'), built on
        first use: each longest draft keeps a controller of its own, since what it learns
        (acceptance, measured speed) depends on it. ``repeatable``: the mode's fixed-length
        form for seeded replies (``modes.repeatable``), kept apart."""
        spec = self.modes[mode or self.mode]
        draft_max = draft_max or self.options.draft_max
        key = (spec, draft_max, repeatable)
        if key not in self._drafting:
            ctx = self._mode_context(draft_max, spec.name)
            self._drafting[key] = repeatable_mode(spec, ctx, self._costs_at_load) if repeatable else spec.build(ctx)
        return self._drafting[key]

    def _mode_context(self, draft_max: int, mode: str) -> ModeContext:
        banned = self.compat.banned_draft_ids if self.compat else frozenset()
        o = self.options
        return ModeContext(
            target=self.target,
            draft=self.draft,
            costs=self.costs,
            draft_max=draft_max,
            adaptive=o.adaptive,
            copy=o.copy,
            banned=banned,
            prior=self._prior(mode),
            history=self._past_replies,
            draft_source="mtp" if self.spec.mtp else "draft",
        )

    def _past_replies(self) -> Sequence[Corpus]:
        """What the suffix drafter reads: the replies kept now (read when asked, so a history
        set after the modes were built counts: the bench gives each mode one of its own)."""
        return self.replies.corpora() if self.replies is not None else ()

    def _prior(self, mode: str) -> float | None:
        """The acceptance prior of ``mode``: what this pair's profile counted here before."""
        profile = self._kept("target")
        use = profile.use.get(self._drafting_key(mode)) if profile else None
        return use.prior() if use else None

    def _verify_history(self) -> dict[int, list[float]]:
        """T(n) as earlier loads of this target measured it here (the profile's history)."""
        profile = self._kept("target")
        return profile.verify_history if profile else {}

    def _draft_history(self) -> list[float]:
        """The draft passes earlier loads of this pair measured here (the profile's history)."""
        profile = self._kept("draft") if self.draft is not None else None
        return profile.draft_pass_history if profile else []

    def _kept(self, model: Literal["target", "draft"]) -> Profile | None:
        """The profile of the target or the drafter as kept so far; None when none is kept."""
        if self.profiles is None or self.profile_keys is None:
            return None
        key = self.profile_keys.target if model == "target" else self.profile_keys.draft
        return self.profiles.get(key) if key else None

    @property
    def _threads(self) -> int:
        """The threads the models run with: automatic is this machine's usable CPUs."""
        return clamp_threads(self.options.threads)[0]

    def _adopt_old_keys(self) -> None:
        """Profiles an older version kept under ``tNone`` (automatic threads, as the app loads)
        are this load's when it runs on every usable CPU: they move to the thread count's key."""
        if self.profiles is None or self.profile_keys is None or self._threads != usable_cpus():
            return
        old = profile_keys(self.spec, self.machine, None, self.offload)
        keys = [(old.target, self.profile_keys.target), (old.draft, self.profile_keys.draft)]
        try:
            for before, key in keys:
                if before and key:
                    self.profiles.adopt(before, key)
        except OSError:
            pass  # a profile is a convenience: a read-only data dir must not stop a chat

    def drafting_state(
        self, mode: Mode | str | None = None, draft_max: int | None = None, params: SamplingParams | None = None
    ) -> DraftingState:
        """Why drafting is on or off for ``mode`` now (core.explain), for the UI to show; for
        a reply with ``params`` (a seeded sampled one drafts a fixed length: ``chat``)."""
        drafting = self.drafting(mode, draft_max, seeded(params))
        kept = sum(c.n_replies for c in self._past_replies()) if drafting.suffix else 0
        history = f"{kept} past repl{'y' if kept == 1 else 'ies'}" if kept else ""
        ctl = drafting.controller
        return explain(ctl.state(), ctl.costs, drafting.copies, history, ctl.reading)

    def prompt_tokens(self, messages: Sequence[dict], raw: bool = False) -> list[int]:
        return prompt_tokens(self.target, messages, raw)

    def fit(self, messages: Sequence[dict], max_tokens: int, raw: bool = False) -> tuple[list[int], list[dict]]:
        """Prompt tokens that leave room for the reply (up to a quarter of the context), and
        the messages they came from: the oldest turns are dropped first, the system prompt
        and the last message never. With ``overflow="refuse"`` nothing is dropped."""
        msgs = list(messages)
        room = reply_room(self.target.n_ctx, max_tokens)
        while True:
            ids = self.prompt_tokens(msgs, raw)
            if len(ids) + room <= self.target.n_ctx:
                return ids, msgs
            droppable = [i for i, m in enumerate(msgs[:-1]) if m["role"] != "system"]
            if self.options.overflow == "refuse" or not droppable:
                raise ContextOverflow(
                    f"the conversation is {len(ids)} tokens and the reply needs {room} more; the "
                    f"context holds {self.target.n_ctx}. Start a new chat, shorten the message, "
                    "or raise the context size (--ctx)."
                )
            del msgs[droppable[0]]

    def chat(
        self,
        messages: Sequence[dict],
        params: SamplingParams = SamplingParams(),
        max_tokens: int = 512,
        mode: Mode | str | None = None,
        raw: bool = False,
        stop: Sequence[str] = (),
        draft_max: int | None = None,
        p_min: float | None = None,
        repeatable: bool | None = None,
        expected_tokens: int | None = None,
    ) -> Iterator[Step]:
        """The reply to ``messages`` in ``mode``, step by step; ``draft_max`` / ``p_min``: this
        reply's drafting limits (see ``engine``); ``expected_tokens``: how long it is expected to
        run where no ``max_tokens`` was asked for (``expected_reply``; else ``max_tokens``). A
        sampled reply with a seed is repeatable (the same seed, the same reply, in this session)
        unless ``repeatable=False`` (the bench, which measures the adaptive drafting at every
        temperature)."""
        ids, _ = self.fit(messages, max_tokens, raw)
        counted = self.modes[mode or self.mode].counts_as_use  # the bench's modes are not the user's use
        if repeatable is None:
            repeatable = seeded(params)
        with self.lock:
            engine = self.engine(mode, draft_max, p_min, prompt_len=len(ids), repeatable=repeatable)
            # the costs decide nothing for the target alone: its replies do not wait on timing them
            engine.after_prefill = self._recheck if drafts(engine) else None
            reply: list[int] = []
            for step in engine.generate(ids, params, max_tokens, stop, expected_tokens):
                if counted:
                    self._count(mode, step)
                reply += step.emitted
                yield step
            if self.replies is not None:  # (a reply cancelled midway closes this generator: not kept)
                self.replies.keep(ids, reply, greedy=params.greedy)

    def _recheck(self) -> None:
        """Time the costs again where the machine's speed moved since the calibration; the
        session's first reply probes T(1) for it (a load timed beside a burst of other work)."""
        sizes = (*CALIBRATION_SIZES, LONGEST_VERIFY)
        recheck(self.costs, self.target, sizes, self.draft, probe=not self._checked)
        self._checked = True

    def divergence(self, messages: Sequence[dict], ref: Sequence[int], got: Sequence[int], raw: bool = False):
        """Where a greedy reply ``got`` parts from the target alone's ``ref`` (None where they
        are the same): the index, and the target-only top-2 logit gap there. A near-tie means
        the batched and single-token kernels' numerics; a large gap would be a real bug."""
        n = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), None)
        if n is None:
            return None if len(ref) == len(got) else {"index": min(len(ref), len(got)), "gap": None}
        self.reset()
        ids = self.fit(messages, 1, raw)[0]
        top2 = np.sort(np.asarray(self.target.sync(ids + list(ref[:n]), n_logits=1)[0]))[-2:]
        self.reset()
        return {"index": n, "gap": float(top2[1] - top2[0])}

    def reset(self) -> None:
        """Empty both KV caches (the next turn is evaluated from scratch)."""
        for m in (self.target, self.draft):
            if m is not None:
                m.truncate(0)

    def _drafting_key(self, mode: str | None) -> str:
        mode = mode or self.mode
        return self._draft_path if mode == "draft" and self._draft_path else mode

    def _count(self, mode: str | None, step: Step) -> None:
        u = self._use.setdefault(self._drafting_key(mode), Use())
        u.tokens += len(step.emitted)
        u.seconds += step.step_seconds
        drafted, accepted = step.own_verdict()  # a copy's verdict is its gate's, not the drafter's (the prior)
        u.drafted += drafted
        u.accepted += accepted
        u.rejected += accepted < drafted
        u.replies += step.finish is not None

    def expected_reply(self) -> int | None:
        """The tokens a reply of this target usually has here (its replies in every mode, kept
        and since: their mean), None before any ended: what a request that asks for no
        ``max_tokens`` is expected to run (``localspec serve``)."""
        kept = self._kept("target")
        uses = [*(kept.use.values() if kept else ()), *self._use.values()]
        total = sum(uses, Use())
        return round(total.tokens / total.replies) if total.replies else None

    def save_profile(self) -> None:
        """Keep what this pair measured here (the target's curve as refined so far, a draft
        pass, the use since the last save) for the pair menu and ``localspec doctor``: the
        load's first save adds this load's measurements to the profile's history, later ones
        amend them (one load, one entry)."""
        keys = self.profile_keys
        if self.profiles is None or keys is None:
            return
        try:
            amend = self._saved
            verify = self.costs.verify.points(own=True)  # this load's, not the history it was seeded with
            target, change = self.spec.target, self._change
            self.profiles.update(keys.target, target, verify=verify, use=self._use, amend=amend, change=change)
            if self.draft is not None and self.costs.t_draft and keys.draft:
                own = self.costs.own_t_draft  # this load's, not the history it was seeded with
                path = self.spec.draft or self.spec.target
                self.profiles.update(keys.draft, path, draft_pass=own, amend=amend)
            self._use, self._saved = {}, True
        except OSError:
            pass  # a profile is a convenience: a read-only data dir must not stop a chat

    def close(self) -> None:
        self.save_profile()
        for m in (self.draft, self.target):
            if m is not None:
                m.close()


def _load_drafter(spec: PairSpec, target, options: LoadOptions, plan: OffloadPlan, say):
    """(the draft model, its compatibility with the target): the target's own MTP layers, a
    Gemma 4 assistant (which reads the target's states and cache), a draft file, or none."""
    from ..llama import backend, ggufinfo

    if spec.mtp:
        from ..llama.mtp import MtpModel

        say("creating the MTP draft context (the target's own layers)")
        return MtpModel(target), None
    if not spec.draft:
        return None, None
    say(f"loading draft {spec.draft.name}")
    if ggufinfo.read_info(spec.draft).arch == "gemma4-assistant":
        from ..llama.assistant import AssistantModel

        return AssistantModel(spec.draft, target, plan.draft_layers), None  # it checks the fit itself
    draft = backend.LlamaModel.load(spec.draft, options.n_ctx, options.threads, plan.draft_layers)
    compat = check_compatible(target.vocab_info(), draft.vocab_info())
    if not compat.ok:
        draft.close()
        raise IncompatiblePair(compat)
    return draft, compat


def seeded(params: SamplingParams | None) -> bool:
    """A sampled reply with a seed: it must repeat, so it drafts a fixed length (modes.repeatable)."""
    return params is not None and params.seed is not None and not params.greedy


def reply_room(n_ctx: int, max_tokens: int) -> int:
    """Tokens kept free for the reply: what was asked, up to a quarter of the context."""
    return min(max_tokens, n_ctx // 4)
