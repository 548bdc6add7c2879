"""The settings file (localspec/settings.py): the option groups of localspec.core.options are
reused, with the keys settings.json has always had; a file that does not load is kept aside,
never lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.core.options import DraftOptions, ModelOptions, ReplyOptions, SamplingParams
from localspec.settings import Settings, load_settings, save_settings, settings_path

# A file as localspec saved it before the option groups (commit 239d303), with a value changed
# from its default in each group: the drafting group had no "copy" nor "history" then, and the
# draft length was "max_k".
BEFORE_THE_GROUPS = """{
  "models_dir": "/m",
  "hub_cache_dir": null,
  "fallback": true,
  "gpu_layers": 0,
  "draft_gpu_layers": null,
  "threads": 2,
  "n_ctx": 8192,
  "max_tokens": 256,
  "default_pair": "qwen2.5-coder",
  "sampling": {
    "temperature": 0.7,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repeat_penalty": 1.0,
    "repeat_last_n": 64,
    "seed": 7,
    "rule": "speculative"
  },
  "draft": {
    "max_k": 6,
    "adaptive": false,
    "p_min": 0.6
  },
  "overflow": "refuse",
  "theme": "textual-light",
  "default_draft": "lookup",
  "show_draft_tokens": true,
  "export_dir": null
}"""


def write(text: str) -> Path:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


class TestOldFiles:
    def test_a_file_from_before_the_option_groups_loads_with_every_value(self):
        write(BEFORE_THE_GROUPS)
        s, warning = load_settings()
        assert warning is None
        assert (s.models_dir, s.gpu_layers, s.threads, s.n_ctx, s.max_tokens) == (Path("/m"), 0, 2, 8192, 256)
        assert (s.overflow, s.theme, s.default_draft, s.show_draft_tokens) == (
            "refuse",
            "textual-light",
            "lookup",
            True,
        )
        assert (s.sampling.temperature, s.sampling.seed) == (0.7, 7)
        assert s.draft == DraftOptions(draft_max=6, adaptive=False, p_min=0.6)  # copy, history: their defaults
        assert s.draft.copy is True and s.draft.history is True

    def test_saving_it_again_keeps_every_old_key_where_it_was(self):
        write(BEFORE_THE_GROUPS)
        saved = json.loads(save_settings(load_settings()[0]).read_text(encoding="utf-8"))
        old = json.loads(BEFORE_THE_GROUPS)
        assert {k: saved[k] for k in old if k not in ("draft", "sampling")} == {
            k: v for k, v in old.items() if k not in ("draft", "sampling")
        }
        assert saved["sampling"] == old["sampling"]
        # the draft length's key is the new name now (localspec.core.options reads both)
        assert saved["draft"] == {"draft_max": 6, "adaptive": False, "p_min": 0.6, "copy": True, "history": True}


class TestGroups:
    def test_the_model_options_and_the_reply_length_sit_at_the_top_level(self):
        top = set(Settings.model_fields)
        assert set(ModelOptions.model_fields) | set(ReplyOptions.model_fields) <= top
        assert Settings.model_fields["draft"].annotation is DraftOptions
        assert Settings.model_fields["sampling"].annotation is SamplingParams

    def test_defaults_are_the_groups(self):
        s = Settings()
        assert all(getattr(s, name) == field.default for name, field in ModelOptions.model_fields.items())
        assert s.max_tokens == ReplyOptions().max_tokens
        assert (s.draft, s.sampling) == (DraftOptions(), SamplingParams())

    def test_round_trip(self):
        draft = DraftOptions(copy=False, draft_max=3, history=False)
        s = Settings(n_ctx=512, overflow="refuse", draft=draft, max_tokens=9)
        save_settings(s)
        assert load_settings() == (s, None)


class TestBadFiles:
    """A file that does not load is copied aside, named in the warning, and left as it was."""

    @pytest.mark.parametrize(
        "text, said",
        [
            ('{"n_ctx": 12}', "n_ctx: Input should be greater than or equal to 256 (got 12)"),
            ('{"draft": {"draft_max": 99}}', "draft.draft_max: Input should be less than or equal to 32 (got 99)"),
            ('{"draft": {"copy": "sometimes"}}', "draft.copy: Input should be a valid boolean"),
            ('{"draft": {"history": "maybe"}}', "draft.history: Input should be a valid boolean"),
            ('{"sampling": {"top_p": 0}}', "sampling.top_p: Input should be greater than 0 (got 0)"),
            ('{"overflow": "wrap"}', "overflow: Input should be 'drop_oldest' or 'refuse' (got 'wrap')"),
            ('{"n_ctx": 4096, "theme": ', "not valid JSON"),
        ],
    )
    def test_kept_aside_with_a_clear_message(self, text, said):
        path = write(text)
        s, warning = load_settings()
        assert s == Settings()
        assert warning is not None and warning.startswith(f"{path}: ") and said in warning
        backups = list(path.parent.glob("settings.json.bad-*"))
        assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == text
        assert f"your file was kept as {backups[0]}" in warning
        assert path.read_text(encoding="utf-8") == text  # never overwritten by loading
