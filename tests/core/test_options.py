"""Options (localspec/core/options.py): one pydantic model per group, each field with its
default, description, range and flag. The ranges and messages of ``check`` are read from the
fields, and the CLI flags, the settings and LoadOptions are made from them, so every entry
point refuses the same values in the same words."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
from annotated_types import Ge, Gt, Le
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pydantic import ValidationError

from localspec.chat.session import LoadOptions, PairSpec, load_options
from localspec.cli import build_parser
from localspec.cli import flags as cli_flags
from localspec.cli.run import LOAD_GROUPS, REPLY_GROUPS, RUN_MAX_TOKENS, spec_and_options
from localspec.core import options
from localspec.core.options import (
    GROUPS,
    OPTIONS,
    DraftOptions,
    ModelOptions,
    OptionError,
    ReplyOptions,
    SamplingParams,
    check,
    clamp_threads,
    flag_of,
    parse,
    require,
)
from localspec.settings import Settings
from tests.support.options import NOT_DEFAULT


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
            ("draft_max", 33, "--draft-max must be ≤ 32 (got 33)"),
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


# every option that is a pydantic field, with the model that holds it: the groups, and the
# models made from them
FIELDS = [
    (model, name)
    for model in (*GROUPS, Settings, LoadOptions)
    for name in model.model_fields
    if name in OPTIONS and not (model is Settings and name in SamplingParams.model_fields)
]


class TestOnePlaceDefinesEachRange:
    def test_every_number_of_every_group_is_an_option_with_a_flag_and_help(self):
        names = [name for group in GROUPS for name in group.model_fields]
        assert len(names) == len(set(names))  # check() finds an option by its field's name
        numbers = [(g, n, f) for g in GROUPS for n, f in g.model_fields.items() if f.annotation in (int, float)]
        for group, name, field in numbers:
            assert name in OPTIONS and flag_of(field) is not None and field.description, f"{group.__name__}.{name}"

    @pytest.mark.parametrize("name", sorted(OPTIONS))
    def test_check_reads_the_range_from_the_field(self, name):
        field = next(g.model_fields[name] for g in GROUPS if name in g.model_fields)
        opt = OPTIONS[name]
        bounds = {type(m): m for m in field.metadata if isinstance(m, (Ge, Gt, Le))}
        assert opt.hi == bounds[Le].le
        assert (opt.lo, opt.lo_open) == ((bounds[Gt].gt, True) if Gt in bounds else (bounds[Ge].ge, False))
        assert (opt.flag, opt.hint) == (flag_of(field).name, flag_of(field).hint)
        assert opt.optional == (field.default is None)

    @pytest.mark.parametrize("model, field", FIELDS, ids=[f"{m.__name__}.{f}" for m, f in FIELDS])
    @hsettings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_pydantic_accepts_exactly_what_check_accepts(self, model, field, data):
        opt = OPTIONS[field]
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
        assert pydantic_ok == (check(field, value) is None)


def command(name: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[name]


# the groups whose flags each command has; the defaults a command sets for itself
COMMAND_GROUPS = {"run": LOAD_GROUPS + REPLY_GROUPS, "bench": LOAD_GROUPS, "serve": LOAD_GROUPS}
OWN_DEFAULTS = {("run", "max_tokens"): RUN_MAX_TOKENS, ("bench", "temperature"): None, ("bench", "max_tokens"): None}


class TestFlagsComeFromTheFields:
    """Every flag that sets an option is made from its field: spelling, type, default, help,
    choices; its value is stored under the field's name and checked against the field's range."""

    @pytest.mark.parametrize("cmd", sorted(COMMAND_GROUPS))
    def test_each_command_has_a_flag_for_every_field_of_its_groups(self, cmd):
        dests = {a.dest for a in command(cmd)._actions}
        for group in COMMAND_GROUPS[cmd]:
            assert set(cli_flags.flagged(group)) <= dests, group.__name__

    @pytest.mark.parametrize("cmd", sorted(COMMAND_GROUPS))
    def test_spelling_type_default_help_and_choices(self, cmd):
        fields = {name: f for g in GROUPS for name, f in g.model_fields.items() if flag_of(f)}
        made = [a for a in command(cmd)._actions if a.dest in fields]
        assert made
        for action in made:
            field, flag = fields[action.dest], flag_of(fields[action.dest])
            assert action.option_strings == [flag.name]
            assert action.default == OWN_DEFAULTS.get((cmd, action.dest), field.default)
            if (cmd, action.dest) in OWN_DEFAULTS:
                continue  # the command's own default, and its own help saying so
            if field.annotation is bool:  # a switch turns the field away from its default
                assert action.const is (not field.default) and action.help == flag.help
            elif action.choices:
                assert tuple(action.choices) == ("speculative", "match") and action.dest == "rule"
            else:
                assert action.type is OPTIONS[action.dest].kind
            said = field.description.rstrip(".")
            assert flag.help or said[1:] in action.help.replace("%%", "%"), action.dest

    def test_the_default_is_said_in_the_help(self):
        helps = {a.dest: a.help for a in command("run")._actions}
        assert helps["n_ctx"] == "context window in tokens (default 4096)"
        assert helps["draft_max"] == "longest draft per step; 0 never drafts (default 16)"
        assert helps["max_tokens"].endswith(f"(default {RUN_MAX_TOKENS})")
        assert helps["threads"].startswith("CPU threads; automatic:")  # None: the help says what happens

    @pytest.mark.parametrize("name", sorted(OPTIONS))
    def test_one_past_the_fields_range_is_refused_in_its_flags_words(self, name):
        opt = OPTIONS[name]
        step = 1 if opt.kind is int else 0.5
        args = command("run").parse_args(["--target", "t.gguf", f"{opt.flag}={opt.hi + step}", "hi"])
        assert cli_flags.check(args, *LOAD_GROUPS, *REPLY_GROUPS) == f"error: {check(name, opt.hi + step)}"
        assert cli_flags.check(args, *LOAD_GROUPS, *REPLY_GROUPS).startswith(f"error: {opt.flag} must be ≤")

    def test_the_groups_are_built_back_from_the_flags(self):
        args = command("run").parse_args(
            ["--target", "t.gguf", "--temp", "0.7", "--seed", "3", "--rule", "match", "--repeat-last-n", "8", "hi"]
        )
        assert cli_flags.from_args(SamplingParams, args) == SamplingParams(
            temperature=0.7, seed=3, rule="match", repeat_last_n=8
        )
        assert cli_flags.from_args(ReplyOptions, args) == ReplyOptions(max_tokens=RUN_MAX_TOKENS)

    def test_a_field_without_a_flag_is_not_a_flag(self):
        assert "overflow" not in cli_flags.flagged(ModelOptions)
        with pytest.raises(ValueError, match="not a command-line option"):
            cli_flags.add_flag(argparse.ArgumentParser(), ModelOptions, "overflow")


# a value other than the default for every field of the model and drafting groups


class TestLoadOptions:
    """One builder (session.load_options) turns the app's settings and the CLI's flags into a
    load's options: neither can leave one out (the app used to drop ``copy``; what the app
    loads with is checked where it loads, in tests/tui/test_app.py, with NOT_DEFAULT)."""

    def test_it_has_every_field_of_both_groups(self):
        assert set(LoadOptions.model_fields) == set(ModelOptions.model_fields) | set(DraftOptions.model_fields)
        assert LoadOptions() == load_options(ModelOptions(), DraftOptions())
        assert set(NOT_DEFAULT) | {"overflow"} == set(LoadOptions.model_fields)

    def test_the_clis_load_options_carry_every_flag(self):
        flags = ["--gpu-layers", "3", "--draft-gpu-layers", "0", "--threads", "2", "--ctx", "512"]
        flags += ["--draft-max", "4", "--no-adapt", "--p-min", "0.5", "--no-copy", "--no-history"]
        args = command("run").parse_args(["--target", "t.gguf", *flags, "hi"])
        spec, opts = spec_and_options(args)
        assert spec.target == Path("t.gguf") and opts == LoadOptions(**NOT_DEFAULT)
        assert spec_and_options(command("run").parse_args(["--target", "t.gguf", "hi"]))[1] == LoadOptions()


class TestDraftMaxZero:
    """A longest draft of 0 never drafts: every entry point asks ``drafting_mode`` and runs the
    target alone, never a mode that would draft at most 0 tokens."""

    @pytest.mark.parametrize(
        ("mode", "draft_max", "runs"),
        [
            ("draft", 0, "none"),
            ("lookup", 0, "none"),
            ("mtp", 0, "none"),
            (None, 0, "none"),  # the pair's own mode, whatever it is
            ("none", 0, "none"),
            ("draft", 1, "draft"),
            ("lookup", 32, "lookup"),
            (None, 16, None),
            ("lookup", None, "lookup"),  # not said here: the load's longest draft decides
        ],
    )
    def test_the_mode_that_runs(self, mode, draft_max, runs):
        assert options.drafting_mode(mode, draft_max) == runs

    @pytest.mark.parametrize("mode", [["--draft", "d.gguf"], ["--lookup"], ["--mtp"], ["--no-draft"], []])
    def test_run_serve_and_bench_load_the_target_alone(self, mode):
        for cmd in ("run", "serve", "bench"):
            args = command(cmd).parse_args(
                ["--target", "t.gguf", *mode, "--draft-max", "0", *(["hi"] * (cmd == "run"))]
            )
            spec, opts = spec_and_options(args)
            assert spec == PairSpec(Path("t.gguf")) and opts.draft_max == 0

    def test_a_longest_draft_of_one_keeps_the_draft(self):
        args = command("run").parse_args(["--target", "t.gguf", "--draft", "d.gguf", "--draft-max", "1", "hi"])
        assert spec_and_options(args)[0] == PairSpec(Path("t.gguf"), Path("d.gguf"))


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
