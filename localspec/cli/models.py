"""`localspec models list | pull | import | check`: the catalog and the files on disk.

Exit codes: 0 done, 1 the operation failed (download error, incompatible pair), 2 bad input
(missing file, not a GGUF, unknown pair), 130 cancelled with Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from ..llama import ggufinfo
from ..llama.compat import check_compatible
from ..models import catalog as cat
from ..models import downloads
from ..settings import load_settings
from ..units import human_bytes_si, memory_total
from .progress import ByteProgress

FITS_FRACTION = 0.8  # leave a fifth of RAM to the OS and other programs


class BadInput(Exception):
    """Shown as one line, exit code 2."""


def register(sub) -> None:
    p = sub.add_parser("models", help="list, download, import and check GGUF models")
    msub = p.add_subparsers(dest="models_command", required=True)
    ls = msub.add_parser("list", help="catalog pairs and what is on disk")
    ls.set_defaults(func=_wrap(cmd_list))
    pull = msub.add_parser("pull", help="download a pair's target and default draft")
    pull.add_argument("pair", nargs="?", help="pair id (default: the default pair)")
    pull.add_argument("--draft", help="model id of another draft from the catalog")
    pull.set_defaults(func=_wrap(cmd_pull))
    imp = msub.add_parser("import", help="register a local GGUF file in your catalog")
    imp.add_argument("path", type=Path)
    how = imp.add_mutually_exclusive_group()
    how.add_argument(
        "--copy", dest="how", action="store_const", const="copy", help="copy it into the models dir (default)"
    )
    how.add_argument("--link", dest="how", action="store_const", const="link", help="link to it where it is")
    imp.add_argument("--name", help="model id in the catalog (default: the file name)")
    imp.set_defaults(func=_wrap(cmd_import), how="copy")
    chk = msub.add_parser("check", help="can DRAFT draft for TARGET? (files or catalog model ids)")
    chk.add_argument("target")
    chk.add_argument("draft")
    chk.set_defaults(func=_wrap(cmd_check))


def _wrap(fn):
    """Settings and catalog loaded once; known failures become one message and an exit code."""

    def run(args: argparse.Namespace) -> int:
        settings, warning = load_settings()
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        try:
            catalog, warnings = cat.load_catalog(settings)
            for w in warnings:
                print(f"warning: {w}", file=sys.stderr)
            return fn(args, settings, catalog)
        except (BadInput, ggufinfo.GgufError) as e:
            print(f"localspec models: {e}", file=sys.stderr)
            return 2
        except downloads.DownloadError as e:
            print(f"localspec models: {e}", file=sys.stderr)
            return 1

    return run


# --- list -----------------------------------------------------------------------------------
def cmd_list(args, settings, catalog) -> int:
    ram = memory_total()
    print(f"RAM: {human_bytes_si(ram)}; memory = target + default draft + KV cache at {settings.n_ctx} tokens")
    rows: list[tuple[str, ...]] = [("", "PAIR", "TARGET", "DRAFT", "MEMORY", "FITS", "ON DISK")]
    for pair in catalog.pairs:
        draft = pair.default_draft
        fits = "?" if ram is None else ("yes" if pair.memory_bytes <= FITS_FRACTION * ram else "no")
        rows.append(
            (
                "*" if pair.id == catalog.default_pair_id else "",
                pair.id,
                f"{pair.target.params} {pair.target.quant} {human_bytes_si(pair.target.size_bytes)}",
                _draft_cell(pair, draft),
                human_bytes_si(pair.memory_bytes),
                fits,
                _on_disk(pair.target, draft, settings),
            )
        )
    print(table(rows))
    in_pairs = {m for p in catalog.pairs for m in [p.target, *p.drafts]}
    singles = [(k, m) for k, m in catalog.models.items() if m not in in_pairs]
    if singles:
        print("\nother models:")
        rows = [("", "MODEL", "SIZE", "FAMILY", "ON DISK")]
        for key, m in singles:
            where = downloads.locate(m, settings)
            rows.append(
                (
                    "",
                    key,
                    f"{m.params} {m.quant} {human_bytes_si(m.size_bytes)}",
                    m.family,
                    str(where) if where else "-",
                )
            )
        print(table(rows))
    print("\n* default pair. Get one with `localspec models pull PAIR`.")
    return 0


def _draft_cell(pair, draft) -> str:
    if draft is not None:
        return f"{draft.params} {draft.quant} {human_bytes_si(draft.size_bytes)}"
    return "MTP (in target)" if pair.default_is_mtp else "-"


def _on_disk(target, draft, settings) -> str:
    t = downloads.locate(target, settings)
    d = downloads.locate(draft, settings) if draft is not None else None
    if t and (d or draft is None):
        return "present"
    return "target" if t else ("draft" if d else "-")


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows as text columns: each padded to its widest cell, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# --- pull -----------------------------------------------------------------------------------
def cmd_pull(args, settings, catalog) -> int:
    try:
        pair = catalog.get(args.pair or catalog.default_pair_id)
    except KeyError as e:
        raise BadInput(str(e)) from None
    draft = pair.default_draft  # None: the default drafter is the target's MTP layers, no file
    if args.draft:
        if args.draft not in catalog.models:
            raise BadInput(f"no model {args.draft!r} in the catalog (see `localspec models list`)")
        draft = catalog.models[args.draft]
    cancel = threading.Event()
    bar = ByteProgress(sys.stderr)
    try:
        for role, ref in (("target", pair.target), ("draft", draft)):
            if ref is None:
                continue
            path = downloads.pull(ref, settings, bar, cancel, note=bar.note)
            bar.finish()
            print(f"{role}: {path} (ok{', sha256 verified' if ref.sha256 else ''})")
    except (KeyboardInterrupt, downloads.DownloadCancelled):
        cancel.set()
        bar.finish()
        print("cancelled; run the same command again to continue", file=sys.stderr)
        return 130
    print(f"pair {pair.id} is ready")
    return 0


# --- import ---------------------------------------------------------------------------------
def cmd_import(args, settings, catalog) -> int:
    src = args.path.expanduser()
    not_file = ggufinfo.not_a_file(src)
    if not_file:
        raise BadInput(f"{src}: {not_file}")
    info = ggufinfo.read_info(src)
    model_id = args.name or src.name.removesuffix(".gguf").lower()
    if model_id in catalog.models:
        raise BadInput(f"a model {model_id!r} is already in the catalog; choose another id with --name")
    dest, created = _place(src, settings.resolved_models_dir(), args.how)
    ref = cat.ModelRef(
        filename=dest.name,
        quant=info.quant,
        size_bytes=info.size_bytes,
        params=info.params,
        family=info.arch,
        kv_bytes_per_token=info.kv_bytes_per_token,
        state_bytes=info.state_bytes,
        n_embd=info.n_embd,
        path=dest,
    )
    try:
        where = cat.add_user_model(model_id, ref)
    except (cat.CatalogError, ValueError, OSError) as e:  # tomllib's decode error is a ValueError
        if created:
            dest.unlink()  # our copy or link; the user's file is untouched
        if isinstance(e, OSError):  # the catalog could not be written (locked by another process, disk full)
            print(f"localspec models: cannot register it: {e}", file=sys.stderr)
            return 1
        raise BadInput(f"cannot register it: {e}") from None
    print(_describe(info))
    print(f"imported as {model_id!r}: {dest} ({'linked' if args.how == 'link' else 'copied'}), listed in {where}")
    return 0


def _place(src: Path, models_dir: Path, how: str) -> tuple[Path, bool]:
    """(path in the models dir, whether we created it)."""
    dest = models_dir / src.name
    if dest.exists() or dest.is_symlink():
        if dest.resolve() == src.resolve():
            return dest, False
        raise BadInput(f"{dest} already exists; rename your file or remove that one first")
    models_dir.mkdir(parents=True, exist_ok=True)
    if how == "link":
        dest.symlink_to(src.resolve())
    else:
        tmp = dest.with_name(dest.name + ".part")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    return dest, True


def _describe(info: ggufinfo.GgufInfo) -> str:
    return (
        f"{info.path}: {info.name}\n"
        f"  architecture {info.arch}, {info.params} parameters, {info.quant}, "
        f"context {info.context_length or '?'}, vocab {info.n_vocab}, file {human_bytes_si(info.size_bytes)}"
    )


# --- check ----------------------------------------------------------------------------------
def resolve_model(spec: str, catalog, settings) -> Path:
    """A path to a file, or a catalog model id whose file is on disk."""
    path = Path(spec).expanduser()
    if path.exists():
        not_file = ggufinfo.not_a_file(path)
        if not_file:
            raise BadInput(f"{path}: {not_file}")
        return path
    if spec in catalog.models:
        found = downloads.locate(catalog.models[spec], settings)
        if found is None:
            raise BadInput(f"{spec}: in the catalog but not on disk; get it with `localspec models pull`")
        return found
    raise BadInput(f"{spec}: no such file, and no model of that id in the catalog")


def cmd_check(args, settings, catalog) -> int:
    paths = [resolve_model(s, catalog, settings) for s in (args.target, args.draft)]
    infos = [ggufinfo.read_info(p) for p in paths]
    vocabs = [ggufinfo.vocab_info(p) for p in paths]
    for role, info, v in zip(("target", "draft"), infos, vocabs):
        print(f"{role}: " + _describe(info))
        print(
            f"  vocab type {v.vocab_type}, BOS {v.bos}, EOS {v.eos}, add BOS {v.add_bos}, "
            f"{len(v.special)} special tokens"
        )
    verdict = check_compatible(*vocabs)
    n_ctx = settings.n_ctx
    memory = sum(i.size_bytes + i.kv_bytes_per_token * n_ctx for i in infos)
    print(f"expected memory: {human_bytes_si(memory)} (both files + KV cache at {n_ctx} tokens)")
    print(verdict.message())
    return 0 if verdict.ok else 1
