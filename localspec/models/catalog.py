"""The catalog of target/draft pairs: the built-in ``catalog.toml`` plus the user's own file.

Both files share one schema (see the comment at the top of ``catalog.toml``): ``[models.ID]``
tables for single GGUF files and ``[[pairs]]`` that name a target and its drafters by model id,
``"mtp"`` standing for the target's own next-token-prediction layers (``MTP``).
The built-in file must be valid (a broken one is a bug: ``CatalogError``). The user file is
checked entry by entry: a bad entry is skipped with a warning naming the file, the entry and
the field, a copy of the file is kept aside, and everything else still works.

``models import`` appends a table to the user file's text (tomli_w renders it) under the file's
lock (``lockedfile``), and checks that the result reads back before it replaces the file.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..core.options import MAX_DRAFT
from ..llama import ggufinfo
from ..llama.memory import READS_HIDDEN, footprint, snapshots_for
from ..llama.preflight import SUPPORTED_ARCHITECTURES
from ..lockedfile import locked, write_atomic
from ..settings import backup_file, config_dir

BUILTIN_NAME = "catalog.toml"
# The drafter id, in a pair's drafts, of the target's own next-token-prediction layers: they
# live inside the target's file, so the id names no model and no [models.ID] table may take it.
MTP = "mtp"


class ModelRef(BaseModel):
    """One GGUF file: where the hub has it, and what the menu says about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: str = Field(default="", description="Hugging Face repo id; empty for a local-only (imported) model.")
    filename: str = Field(description="File name in the repo (and on disk).")
    quant: str = Field(description="Quantization, e.g. Q4_K_M.")
    size_bytes: int = Field(ge=0, description="File size; exact when sha256 is pinned, else approximate.")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="Pinned digest, if known.")
    params: str = Field(description='Parameter count as people say it, e.g. "1.5B".')
    family: str = Field(description="Model family; drafts come from the same family.")
    arch: str = Field("", description="GGUF general.architecture; empty when not given.")
    mtp: bool = Field(False, description="Has next-token-prediction layers (nextn_predict_layers > 0).")
    kv_bytes_per_token: int = Field(
        0, ge=0, description="F16 K+V cache bytes per context token, sliding-window layers included."
    )
    state_bytes: int = Field(0, ge=0, description="One copy of a recurrent or hybrid model's state; 0 for none.")
    n_embd: int = Field(
        0, ge=0, description="Hidden size: the width of the states an MTP layer or a Gemma 4 assistant reads."
    )
    path: Path | None = Field(None, description="Local file for imported models.")

    @field_validator("arch")
    @classmethod
    def _loadable(cls, arch: str) -> str:
        if arch and arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"architecture {arch!r}: this llama.cpp build does not load it")
        return arch


class Pair(BaseModel):
    """A target with its drafters in order of preference (first = default): draft files known to
    share its vocabulary, and MTP, the target's own next-token-prediction layers, where it has them."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    family: str
    target: ModelRef
    drafts: list[ModelRef] = Field(description="The draft files in order of preference; empty for MTP alone.")
    drafters: list[str] = Field(description=f"Every drafter's model id in order of preference, {MTP!r} for MTP.")
    good_for: str
    license: str
    memory_bytes: int = Field(
        description="Target + default draft + KV cache and other states of both at the default context."
    )

    @property
    def mtp(self) -> bool:
        """The pair offers the target's MTP layers as a drafter."""
        return MTP in self.drafters

    @property
    def default_is_mtp(self) -> bool:
        return self.drafters[:1] == [MTP]

    @property
    def default_draft(self) -> ModelRef | None:
        """The default draft file; None when the default drafter is MTP (no file of its own)."""
        return None if self.default_is_mtp or not self.drafts else self.drafts[0]


@dataclass(frozen=True)
class TargetMtp:
    """Whether a target drafts for itself with its own next-token-prediction (MTP) layers, and
    what says so: its file on disk, and the catalog."""

    # the MTP layers the file carries whole (declared, and their tensors there: ggufinfo.nextn_layers);
    # None: no file on disk, or one that cannot be read
    in_file: int | None
    listed: bool  # the catalog's entry says the target has them (ModelRef.mtp)

    @property
    def present(self) -> bool:
        """The file decides when it can be read: a user's own MTP file is found though the
        catalog says nothing of it, and a plain copy under the MTP file's name is caught. A
        file that cannot be read is left to its load to explain; the catalog's word stands."""
        return self.in_file > 0 if self.in_file is not None else self.listed


def target_mtp(path: Path | None, ref: ModelRef | None = None) -> TargetMtp:
    """The MTP layers of the target whose file is at ``path`` (None: not on disk) and whose
    catalog entry is ``ref`` (None: a file given on the command line). The one place that
    decides it: the pair menu offers MTP when ``.present``, and ``localspec --target`` and
    ``localspec run`` draft with it by default."""
    return TargetMtp(_nextn_layers(Path(path)) if path is not None else None, ref.mtp if ref is not None else False)


def _nextn_layers(path: Path) -> int | None:
    """The file's MTP layers, None where it cannot be read; its header is read once per version
    of the file (the pair menu asks at each highlight)."""
    try:
        return _nextn_of(path, path.stat().st_mtime_ns)
    except OSError:
        return None


@functools.lru_cache(maxsize=64)
def _nextn_of(path: Path, mtime_ns: int) -> int | None:
    """``_nextn_layers`` of one version of the file (``mtime_ns`` keys the cache)."""
    try:
        ggufinfo.read_metadata(path)  # nextn_layers says 0 for a file it cannot read: here, the catalog decides
    except (ggufinfo.GgufError, OSError, ValueError):
        return None
    return ggufinfo.nextn_layers(path)


class _PairEntry(BaseModel):
    """A pair as written in a file: models by id, and "mtp" for the target's own MTP layers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    name: str
    family: str
    target: str
    drafts: list[str] = Field(min_length=1)
    good_for: str = ""
    license: str = ""


class CatalogError(Exception):
    pass


class UnknownPair(KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Catalog:
    def __init__(self, pairs: list[Pair], default_pair_id: str, models: dict[str, ModelRef]) -> None:
        self.pairs = pairs
        self.default_pair_id = default_pair_id
        self.models = models  # every single model by id, built-in and user's

    def get(self, pair_id: str) -> Pair:
        for pair in self.pairs:
            if pair.id == pair_id:
                return pair
        known = ", ".join(p.id for p in self.pairs)
        raise UnknownPair(f"no pair {pair_id!r} in the catalog; known pairs: {known}")

    @property
    def default(self) -> Pair:
        return self.get(self.default_pair_id)


def user_catalog_path() -> Path:
    return config_dir() / "catalog.toml"


def load_catalog(settings, user_path: Path | None = None) -> tuple[Catalog, list[str]]:
    """(catalog, warnings). Never raises for a bad user file; raises CatalogError for a bad built-in."""
    raw = tomllib.loads(resources.files(__package__).joinpath(BUILTIN_NAME).read_text(encoding="utf-8"))
    models, pairs_raw, problems = _models_and_pairs(raw, BUILTIN_NAME)
    default_id = raw.get("default_pair")
    user_path = user_path or user_catalog_path()
    user_problems: list[str] = []
    user_notes: list[str] = []
    if user_path.exists():
        user_raw, user_problems, user_notes = _read_user_file(user_path)
        u_models, u_pairs, entry_problems = _models_and_pairs(user_raw, str(user_path))
        models.update(u_models)
        pairs_raw = {**pairs_raw, **u_pairs}
        default_id = user_raw.get("default_pair", default_id)
        user_problems += entry_problems
    pairs, ref_problems = _resolve_pairs(pairs_raw, models, settings.n_ctx, settings.draft.draft_max)
    for p in problems + [p for p in ref_problems if p.startswith(BUILTIN_NAME)]:
        raise CatalogError(f"built-in catalog is broken: {p}")
    user_problems += ref_problems
    warnings = user_notes + user_problems
    if user_problems:
        warnings.append(f"a copy of {user_path} was kept as {_backup_once(user_path)}; the other entries are in use")
    default_id, note = _pick_default(pairs, default_id, settings.default_pair)
    return Catalog(pairs, default_id, models), warnings + note


def _pick_default(pairs: list[Pair], from_files, from_settings: str | None) -> tuple[str, list[str]]:
    """Settings win over the catalog files; an unknown id is reported and skipped."""
    ids = [p.id for p in pairs]
    for source, wanted in (("settings: default_pair", from_settings), ("catalog: default_pair", from_files)):
        if wanted is None:
            continue
        if wanted in ids:
            return wanted, []
        fallback = from_files if from_files in ids else ids[0]
        return fallback, [f"{source} {wanted!r} is not in the catalog; using {fallback!r}"]
    return ids[0], []


def _backup_once(path: Path) -> Path:
    """settings.backup_file, unless an identical copy was already kept (a bad file is met at every start)."""
    content = path.read_bytes()
    for old in sorted(path.parent.glob(f"{path.name}.bad-*")):
        if old.read_bytes() == content:
            return old
    return backup_file(path)


def _read_user_file(path: Path) -> tuple[dict[str, Any], list[str], list[str]]:
    """(parsed file, problems, notes): a problem gets the file copied aside, a note is only said."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        return {}, [f"{path}: not valid TOML ({e}); the whole file was ignored"], []
    try:
        return tomllib.loads(text), [], []
    except tomllib.TOMLDecodeError as e:
        repaired = _repair_user_file(path, text)
        if repaired:
            return repaired[0], [], [repaired[1]]
        return {}, [f"{path}: not valid TOML ({e}); the whole file was ignored"], []


# An older localspec wrote a model id with json.dumps, which escapes a character beyond U+FFFF as
# a UTF-16 surrogate pair ("\ud83d\ude00" for 😀); TOML refuses that (an escape must name a
# character), so the whole file stopped loading. Only its own table headers had such escapes.
_OLD_HEADER = re.compile(r'^(\[models\.)("(?:[^"\\\n]|\\.)*")(\][ \t]*\r?)$', re.M)
_ESCAPE = re.compile(r"\\(?:u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|.)", re.I)


def repair_surrogate_escapes(text: str) -> tuple[str, list[str]]:
    """(text, the ids repaired): each surrogate pair escape in a ``[models."..."]`` header made
    the character it stands for; everything else is left as it was, byte for byte."""
    repaired: list[str] = []

    def header(m: re.Match[str]) -> str:
        key = _ESCAPE.sub(_decode_pair, m[2])
        if key != m[2]:
            repaired.append(key)
        return m[1] + key + m[3]

    return _OLD_HEADER.sub(header, text), repaired


def _decode_pair(m: re.Match[str]) -> str:
    if not m[1]:
        return m[0]  # any other escape, "\\" included, stays
    high, low = int(m[1], 16), int(m[2], 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _repair_user_file(path: Path, text: str) -> tuple[dict[str, Any], str] | None:
    """The file parsed after repair_surrogate_escapes, and a note saying so; None when that does
    not make it valid. The damaged file is copied aside, then replaced with the repaired text."""
    fixed, ids = repair_surrogate_escapes(text)
    if not ids:
        return None
    try:
        raw = tomllib.loads(fixed)
    except tomllib.TOMLDecodeError:
        return None
    names = ", ".join(repr(tomllib.loads(f"k = {k}")["k"]) for k in ids)
    said = f"{path}: the model ids {names} were written by an older localspec in a form TOML refuses"
    try:
        with locked(path):
            if path.read_text(encoding="utf-8") != text:  # another process repaired (or changed) it meanwhile
                return raw, f"{said}; read them repaired"
            backup = _backup_once(path)
            write_atomic(path, fixed)
    except OSError as e:
        return raw, f"{said}; read them repaired, but the file could not be rewritten ({e})"
    return raw, f"{said}; repaired them in the file, and kept the original as {backup}"


def _models_and_pairs(
    raw: dict, source: str
) -> tuple[dict[str, ModelRef], dict[str, tuple[str, _PairEntry]], list[str]]:
    """Validate each entry on its own. Returns models by id, pairs by id (with where they came from)."""
    problems: list[str] = []
    unknown = set(raw) - {"default_pair", "models", "pairs"}
    problems += [
        f"{source}: top level: unknown key {k!r} (expected default_pair, models, pairs)" for k in sorted(unknown)
    ]
    models: dict[str, ModelRef] = {}
    raw_models, raw_pairs = raw.get("models") or {}, raw.get("pairs") or []
    if not isinstance(raw_models, dict) or not isinstance(raw_pairs, list):
        return {}, {}, problems + [f"{source}: top level: 'models' must be tables and 'pairs' an array of tables"]
    for model_id, entry in raw_models.items():
        if model_id == MTP:
            problems.append(f"{source}: models.{MTP}: the id {MTP!r} means a target's own MTP layers; entry skipped")
            continue
        try:
            models[model_id] = ModelRef.model_validate(entry)
        except ValidationError as e:
            problems += _describe(source, f"models.{model_id}", e)
    pairs: dict[str, tuple[str, _PairEntry]] = {}
    for i, entry in enumerate(raw_pairs):
        where = f"pairs[{i}]" + (f" (id {entry['id']!r})" if isinstance(entry, dict) and "id" in entry else "")
        try:
            pair = _PairEntry.model_validate(entry)
        except ValidationError as e:
            problems += _describe(source, where, e)
            continue
        pairs[pair.id] = (f"{source}: {where}", pair)
    return models, pairs, problems


def _describe(source: str, where: str, e: ValidationError) -> list[str]:
    out = []
    for err in e.errors():
        field = ".".join(str(x) for x in err["loc"]) or "(entry)"
        out.append(f"{source}: {where}: field {field!r}: {err['msg']} (got {err.get('input')!r}); entry skipped")
    return out


def _resolve_pairs(
    pairs_raw: dict, models: dict[str, ModelRef], n_ctx: int, draft_max: int
) -> tuple[list[Pair], list[str]]:
    pairs, problems = [], []
    for where, entry in pairs_raw.values():
        files = [d for d in entry.drafts if d != MTP]
        missing = [(f, m) for f, ms in (("target", [entry.target]), ("drafts", files)) for m in ms if m not in models]
        if missing:
            problems += [f"{where}: field {f!r}: no model {m!r} in the catalog; entry skipped" for f, m in missing]
            continue
        target = models[entry.target]
        if MTP in entry.drafts and not target.mtp:
            problems.append(
                f"{where}: field 'drafts': {MTP!r} means the target's own MTP layers, and the target "
                f"{entry.target!r} has none (its table does not say mtp = true); entry skipped"
            )
            continue
        default = None if entry.drafts[0] == MTP else models[entry.drafts[0]]  # MTP adds no file
        pairs.append(
            Pair(
                id=entry.id,
                name=entry.name,
                family=entry.family,
                target=target,
                drafts=[models[d] for d in files],
                drafters=list(entry.drafts),
                good_for=entry.good_for,
                license=entry.license,
                memory_bytes=memory_estimate(target, default, n_ctx, draft_max),
            )
        )
    return pairs, problems


def memory_estimate(target: ModelRef, draft: ModelRef | None, n_ctx: int, draft_max: int = MAX_DRAFT) -> int:
    """Weights plus the KV cache and other states of both models at n_ctx (``llama.memory``:
    a recurrent state with the target's snapshots for drafts of up to ``draft_max`` tokens and
    the checkpoints of each, the target's hidden states when its MTP layers or a Gemma 4
    assistant draft); compute buffers not included. No draft (None) for MTP: its layers are in
    the target's file, and its KV in the target's figure."""
    hidden = (draft is None and target.mtp) or (draft is not None and draft.arch in READS_HIDDEN)
    state = target.state_bytes
    states = footprint(
        target.kv_bytes_per_token,
        state,
        n_ctx,
        snapshots=snapshots_for(state, draft_max),
        hidden_width=target.n_embd if hidden else 0,
    )
    total = target.size_bytes + states.with_layers + states.on_host
    if draft is not None:
        states = footprint(draft.kv_bytes_per_token, draft.state_bytes, n_ctx)
        total += draft.size_bytes + states.with_layers + states.on_host
    return total


def toml_entry(model_id: str, ref: ModelRef) -> str:
    """A ``[models.ID]`` table for the user file, rendered by tomli_w (any id quoted as TOML wants it)."""
    fields = {k: str(v) if isinstance(v, Path) else v for k, v in ref.model_dump(exclude_none=True).items()}
    for key in ("repo", "arch", "mtp", "state_bytes", "n_embd"):  # said only when given
        if not fields.get(key):
            fields.pop(key, None)
    text = tomli_w.dumps({"models": {model_id: fields}})
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # half a UTF-16 pair: what Python makes of bytes that are not UTF-8
        raise CatalogError(
            f"{model_id!r}: the id or the file's path is not valid text (UTF-8); "
            "choose another --name or rename the file"
        ) from None
    return text


def add_user_model(model_id: str, ref: ModelRef, path: Path | None = None) -> Path:
    """Append one model to the user catalog, keeping whatever the user wrote there (comments
    too: the new table is added to the text, never re-rendered from parsed data). The file's
    lock is held from the read to the replace, so two imports at once both land."""
    path = path or user_catalog_path()
    entry = toml_entry(model_id, ref)
    with locked(path):
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        try:
            models = tomllib.loads(existing).get("models") or {}
        except tomllib.TOMLDecodeError as e:
            raise CatalogError(
                f"{path}: not valid TOML ({e}); nothing was changed. Fix the file or move it aside, then import again"
            ) from None
        if isinstance(models, dict) and model_id in models:  # anything else is refused by _reads_back
            raise CatalogError(f"{path}: a model {model_id!r} is already there; choose another --name")
        text = existing + _separator(existing) + entry
        problem = _reads_back(text, model_id, ref)
        if problem:
            raise CatalogError(
                f"{path}: with {model_id!r} added the file would not read back ({problem}); nothing was changed"
            )
        write_atomic(path, text)
    return path


def _reads_back(text: str, model_id: str, ref: ModelRef) -> str | None:
    """None when ``text`` parses and holds ``ref`` under ``model_id``, else what is wrong.
    Appending can still break a file that parses: a ``models = {...}`` inline table, say."""
    try:
        added = (tomllib.loads(text).get("models") or {}).get(model_id)
        if added is None:
            return f"no model {model_id!r} in it"
        if ModelRef.model_validate(added) != ref:
            return f"{model_id!r} reads as {added!r}"
    except (tomllib.TOMLDecodeError, ValidationError, AttributeError) as e:
        return str(e)
    return None


def _separator(existing: str) -> str:
    """A blank line between the user's text and the new table."""
    if not existing or existing.endswith("\n\n"):
        return ""
    return "\n" if existing.endswith("\n") else "\n\n"
