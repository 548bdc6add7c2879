"""Command-line flags made from the option groups of ``localspec.core.options``.

Each field marked with a ``Flag`` becomes one flag: its spelling, type, default, choices and
help come from the field, and the value is stored under the field's name, so
:func:`from_args` builds the group back from the parsed arguments. :func:`check` refuses a
value out of range in options' words ("error: --temp must be ≥ 0 (got -1)") before anything
is loaded: argparse only converts the text, the ranges are the fields'.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..core import options
from ..core.options import Flag

Group = TypeVar("Group", bound=BaseModel)


def flagged(group: type[BaseModel]) -> dict[str, Flag]:
    """The group's fields that are flags, by field name, in the group's order."""
    return {name: flag for name, field in group.model_fields.items() if (flag := options.flag_of(field))}


def add_flags(
    parser: argparse.ArgumentParser, group: type[BaseModel], defaults: Mapping[str, Any] | None = None
) -> None:
    """One flag for each flagged field of ``group``; ``defaults`` replaces a field's default
    for this command (and the help says so)."""
    defaults = defaults or {}
    for name in flagged(group):
        add_flag(parser, group, name, **({"default": defaults[name]} if name in defaults else {}))


def add_flag(parser: argparse.ArgumentParser, group: type[BaseModel], name: str, **overrides: Any) -> argparse.Action:
    """The flag of one field. ``overrides`` replace what argparse is given: the bench repeats
    --temp (``action="append"``) and has no default --max-tokens of its own."""
    field = group.model_fields[name]
    flag = options.flag_of(field)
    if flag is None:
        raise ValueError(f"{group.__name__}.{name} is not a command-line option")
    default = overrides.pop("default", field.default)
    kwargs: dict[str, Any] = {"dest": name, "default": default, "help": _help(field, flag, default)}
    if field.annotation is bool:  # a switch flips the default: --no-adapt turns adaptive off
        kwargs["action"] = "store_false" if field.default else "store_true"
    elif get_origin(field.annotation) is Literal:
        kwargs["choices"] = get_args(field.annotation)
    else:
        kwargs["type"] = options.OPTIONS[name].kind
        kwargs["metavar"] = flag.name.lstrip("-").replace("-", "_").upper()  # --draft-max DRAFT_MAX
    kwargs.update(overrides)
    return parser.add_argument(flag.name, **kwargs)


def check(args: argparse.Namespace, *groups: type[BaseModel]) -> str | None:
    """'error: ...' for the first flag of ``groups`` whose value is out of its range, in the
    groups' order; None when every one is allowed. Flags a command does not have are skipped."""
    for group in groups:
        for name in flagged(group):
            if name in options.OPTIONS and hasattr(args, name):
                problem = options.check(name, getattr(args, name))
                if problem:
                    return f"error: {problem}"
    return None


def from_args(group: type[Group], args: argparse.Namespace) -> Group:
    """``group`` from the parsed arguments: each flag's value, the defaults for the rest.
    Call :func:`check` first; a value out of range here is a pydantic ValidationError."""
    return group.model_validate({name: getattr(args, name) for name in flagged(group) if hasattr(args, name)})


def _help(field: FieldInfo, flag: Flag, default: Any) -> str:
    """The field's description as a flag's help, with the default where there is one to say
    ('automatic' is in the description of a field whose default is None)."""
    if flag.help:
        text = flag.help
    else:
        text = (field.description or "").rstrip(".")
        if text[:2].istitle():  # "Context window" reads as "context window"; "RNG seed" stays
            text = text[0].lower() + text[1:]
        if default is not None and not isinstance(default, bool):
            text += f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
    return text.replace("%", "%%")  # argparse formats help with %


def given_flags(args, group) -> list[str]:
    """The flags of ``group`` whose parsed value is not the field's default, as they would be
    typed: a run given no flag gets the same default itself."""
    out: list[str] = []
    for name, flag in flagged(group).items():
        value, default = getattr(args, name, None), group.model_fields[name].default
        if value is None or value == default:
            continue
        out += [flag.name] if isinstance(value, bool) else [flag.name, str(value)]
    return out
