"""Option ranges and their messages (localspec/core/options.py): one table, used by the CLI, the
settings model, SamplingParams and the settings screens, so each refuses the same values in
the same words."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pydantic import ValidationError

from localspec.core import options
from localspec.core.options import OPTIONS, OptionError, check, clamp_threads, parse, require
from localspec.core.sampling import SamplingParams
from localspec.settings import DraftSettings, Settings


class TestMessages:
    @pytest.mark.parametrize(
        "name, value, message",
        [
            ("temperature", -1.0, "--temp must be ≥ 0 (got -1); 0 is greedy"),
            ("temperature", 7.5, "--temp must be ≤ 5 (got 7.5)"),
            ("n_ctx", 16, "--ctx must be ≥ 256 (got 16); llama.cpp allocates at least 256 tokens"),
            ("n_ctx", 2_000_000, "--ctx must be ≤ 1048576 (got 2000000)"),
            ("threads", 0, "--threads must be ≥ 1 (got 0)"),
            ("threads", 999, "--threads must be ≤ 512 (got 999)"),
            ("max_k", 33, "--draft-max must be ≤ 32 (got 33)"),
            ("top_p", 0.0, "--top-p must be > 0 (got 0); 1 turns it off"),
            ("seed", -5, "--seed must be ≥ 0 (got -5)"),
            ("p_min", math.nan, "--p-min must be a number from 0 to 1 (got nan)"),
            ("max_tokens", 2.5, "--max-tokens must be a whole number from 1 to 1048576 (got 2.5)"),
            ("top_k", True, "--top-k must be a whole number from 0 to 2147483647 (got True)"),
            ("n_ctx", None, "--ctx needs a value, from 256 to 1048576"),
        ],
    )
    def test_names_the_option_the_range_and_the_value(self, name, value, message):
        assert check(name, value).startswith(message)

    def test_the_label_replaces_the_flag(self):
        assert check("n_ctx", 12, label="n_ctx").startswith("n_ctx must be ≥ 256 (got 12)")

    @pytest.mark.parametrize("name", sorted(OPTIONS))
    def test_both_ends_are_allowed_and_one_step_past_is_not(self, name):
        opt = OPTIONS[name]
        step = 1 if opt.kind is int else 1e-9
        if opt.lo is not None:
            assert (check(name, opt.lo) is None) != opt.lo_open
            assert check(name, opt.lo - step) is not None
        assert check(name, opt.hi) is None
        assert check(name, opt.hi + step) is not None
        assert (check(name, None) is None) == opt.optional

    @pytest.mark.parametrize(
        "name, value", [("p_min", math.inf), ("temperature", -math.inf), ("top_p", math.nan), ("n_ctx", "4096")]
    )
    def test_not_a_finite_number_is_refused(self, name, value):
        assert check(name, value) is not None

    def test_require_raises_with_the_message(self):
        assert require("temperature", 0.7) == 0.7
        with pytest.raises(OptionError, match=r"--temp must be ≥ 0 \(got -1\)"):
            require("temperature", -1.0)


class TestParseFormText:
    @pytest.mark.parametrize(
        "name, text, value",
        [
            ("n_ctx", " 4096 ", 4096),
            ("p_min", "0.5", 0.5),
            ("threads", "", None),
            ("threads", "auto", None),
            ("seed", "none", None),
            ("temperature", "0", 0.0),
        ],
    )
    def test_values(self, name, text, value):
        assert parse(name, text) == value

    @pytest.mark.parametrize(
        "name, text, message",
        [
            ("n_ctx", "", "n_ctx needs a value, from 256 to 1048576"),
            ("n_ctx", "lots", "n_ctx must be a whole number from 256 to 1048576 (got 'lots')"),
            ("n_ctx", "12", "n_ctx must be ≥ 256 (got 12)"),
            ("threads", "1.5", "threads must be a whole number from 1 to 512, or empty for automatic (got '1.5')"),
            ("p_min", "nan", "p_min must be a number from 0 to 1 (got nan)"),
        ],
    )
    def test_refusals_name_the_field(self, name, text, message):
        with pytest.raises(OptionError) as e:
            parse(name, text, label=name)
        assert str(e.value).startswith(message)


# every option that is also a pydantic field, with the model that holds it
FIELDS = [
    (Settings, "n_ctx", "n_ctx"),
    (Settings, "threads", "threads"),
    (Settings, "max_tokens", "max_tokens"),
    (Settings, "gpu_layers", "gpu_layers"),
    (Settings, "draft_gpu_layers", "draft_gpu_layers"),
    (DraftSettings, "max_k", "max_k"),
    (DraftSettings, "p_min", "p_min"),
] + [
    (SamplingParams, f, f)
    for f in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed")
]


class TestOnePlaceDefinesEachRange:
    @pytest.mark.parametrize("model, field, name", FIELDS, ids=[f"{m.__name__}.{f}" for m, f, _ in FIELDS])
    @hsettings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_pydantic_accepts_exactly_what_check_accepts(self, model, field, name, data):
        opt = OPTIONS[name]
        lo = opt.lo if opt.lo is not None else -(10**6)
        near = st.sampled_from([lo, opt.hi, lo - 1, opt.hi + 1, 0])
        values = (
            (st.integers(lo - 10, opt.hi + 10) | near)
            if opt.kind is int
            else (st.floats(allow_nan=True, allow_infinity=True) | st.floats(lo - 1, opt.hi + 1) | near.map(float))
        )
        value = data.draw(values)
        try:
            model.model_validate({field: value})
            pydantic_ok = True
        except ValidationError:
            pydantic_ok = False
        assert pydantic_ok == (check(name, value) is None)

    def test_each_checked_cli_flag_is_its_options_flag(self):
        from localspec.cli import build_parser
        from localspec.cli.run import MODEL_FLAGS, REPLY_FLAGS

        run = build_parser()._subparsers._group_actions[0].choices["run"]
        flags = {a.dest: a.option_strings for a in run._actions}
        for attr, name in {**MODEL_FLAGS, **REPLY_FLAGS}.items():
            assert OPTIONS[name].flag in flags[attr]


class TestThreads:
    def test_more_than_the_machine_is_lowered_with_a_note(self, monkeypatch):
        monkeypatch.setattr(options, "usable_cpus", lambda: 2)
        assert clamp_threads(1) == (1, None)
        assert clamp_threads(None) == (2, None)
        n, note = clamp_threads(64)
        assert n == 2 and note == "--threads 64 is more than the 2 CPUs this process can use; using 2"

    def test_usable_cpus_is_positive(self):
        assert options.usable_cpus() >= 1


class TestCli:
    """Each flag out of range: one line, exit 2, before any model is loaded (the target does not
    even exist, so a load would say so instead)."""

    @pytest.mark.parametrize(
        "flags, message",
        [
            (["--temp", "-1"], "error: --temp must be ≥ 0 (got -1); 0 is greedy"),
            (["--ctx", "16"], "error: --ctx must be ≥ 256 (got 16)"),
            (["--ctx", "1"], "error: --ctx must be ≥ 256 (got 1)"),
            (["--threads", "999"], "error: --threads must be ≤ 512 (got 999)"),
            (["--draft-max", "64"], "error: --draft-max must be ≤ 32 (got 64)"),
            (["--p-min", "nan"], "error: --p-min must be a number from 0 to 1 (got nan)"),
            (["--top-p", "0"], "error: --top-p must be > 0 (got 0)"),
            (["--seed", "-1"], "error: --seed must be ≥ 0 (got -1)"),
            (["--max-tokens", "0"], "error: --max-tokens must be ≥ 1 (got 0)"),
            (["--repeat-penalty", "0.5"], "error: --repeat-penalty must be ≥ 1 (got 0.5)"),
            (["--gpu-layers", "-2"], "error: --gpu-layers must be ≥ -1 (got -2)"),
        ],
    )
    def test_one_line_exit_2(self, tmp_path, capsys, flags, message):
        from localspec.cli import main

        rc = main(["run", "--target", str(tmp_path / "absent.gguf"), *flags, "hi"])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1
        assert "pydantic" not in err and "Traceback" not in err
