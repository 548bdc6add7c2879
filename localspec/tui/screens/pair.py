"""The pair menu: the catalog's pairs with size, memory and presence, a drafter (a compatible
draft, the target's own MTP layers, prompt lookup, or none) with a line for each drafter not
offered and why, the draft length and p_min."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from ...core import options
from ...models.catalog import Catalog, ModelRef, Pair, target_mtp
from ...units import human_bytes, memory_total


@dataclass(frozen=True)
class PairChoice:
    pair_id: str
    draft: ModelRef | None  # None for MTP / prompt lookup / no draft
    mode: str  # "draft" | "mtp" | "lookup" | "none"
    draft_max: int
    adaptive: bool
    p_min: float


MTP_LABEL = "MTP layers: built into the model, nothing to download"
Locate = Callable[[ModelRef], "Path | None"]


def compatible_drafts(pair: Pair) -> list[ModelRef]:
    """The pair's drafts that can verify against its target: same tokenizer family.

    The catalog lists drafts per pair; a draft of another family (another vocabulary) would
    fail llama.cpp's compatibility check at load, so the menu never offers it.
    """
    return [d for d in pair.drafts if d.family == pair.target.family]


def draft_options(pair: Pair, locate: Locate | None = None) -> list[tuple[str, str]]:
    """(label, value) for the draft selector: the drafters offered, then lookup and none."""
    return drafters(pair, locate)[0]


def drafters(pair: Pair, locate: Locate | None = None) -> tuple[list[tuple[str, str]], list[str]]:
    """(label, value) of each drafter offered for the pair's target, in the pair's order of
    preference, then prompt lookup and none; and a line for each one not offered, saying why
    (another vocabulary, a file that is missing with nowhere to download it from, no MTP
    layers). ``locate(ref)``: the file on disk, if any: what a present file holds is what counts."""
    offered: list[tuple[str, str]] = []
    why_not: list[str] = []
    mtp, mtp_note = _mtp(pair, locate)
    for d in pair.drafts:
        if d.family != pair.target.family:
            why_not.append(f"{d.filename}: another vocabulary ({d.family}; the target is {pair.target.family})")
        elif locate is not None and locate(d) is None and not d.repo:
            why_not.append(f"{d.filename}: its file is missing and it has no hub repo to download it from")
        else:
            offered.append((f"{d.filename}  ({human_bytes(d.size_bytes)})", f"draft:{d.filename}"))
    if mtp:
        at = 0 if pair.default_is_mtp or not offered else len(offered)
        offered.insert(at, (MTP_LABEL, "mtp"))
    else:
        why_not.append(mtp_note)
    offered += [("prompt lookup (no draft model)", "lookup"), ("none (target alone)", "none")]
    return offered, why_not


def _mtp(pair: Pair, locate: Locate | None) -> tuple[bool, str]:
    """Whether the target drafts for itself (``catalog.target_mtp``), and if not why."""
    path = locate(pair.target) if locate is not None else None
    mtp = target_mtp(path, pair.target)
    if mtp.present:
        return True, ""
    if path is None or mtp.in_file is None:  # no file to read (one that cannot be: its load says why)
        return False, f"MTP: {pair.target.filename} has no MTP layers"
    if mtp.listed:
        return False, (
            f"MTP: {path.name} on disk has no MTP layers (a copy of the plain file?); "
            f"the MTP file is in {pair.target.repo}"
        )
    return False, f"MTP: {path.name} has no MTP layers whole (nextn_predict_layers = 0, or their tensors missing)"


class PairScreen(ModalScreen[PairChoice | None]):
    """Pairs from the catalog with size, memory and presence; compatible drafts only."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel"), Binding("ctrl+o", "open", "Open pair")]

    def __init__(
        self,
        catalog: Catalog,
        present: Callable[[ModelRef], bool],
        selected: str | None,
        draft_choice: str | None,
        draft_max: int,
        adaptive: bool,
        p_min: float,
        expected: Callable[[Pair], str | None] | None = None,
        locate: Locate | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.catalog = catalog
        self.present = present
        self.expected = expected  # pair -> "expected here: ..." from this machine's profiles
        self.locate = locate  # ref -> its file on disk, or None
        self.selected = selected or catalog.default_pair_id
        self.draft_choice = draft_choice
        self.draft_max, self.adaptive, self.p_min = draft_max, adaptive, p_min
        self.ram = memory_total()

    def _pair_label(self, pair: Pair) -> Text:
        refs = [pair.target] + ([pair.default_draft] if pair.default_draft else [])
        size = sum(r.size_bytes or 0 for r in refs)
        have = all(self.present(r) for r in refs)
        text = Text()
        text.append(f"{pair.name}", style="bold")
        if pair.id == self.catalog.default_pair_id:
            text.append("  (default)", style="#00af5f")
        text.append(
            f"\n  {human_bytes(size)} {'on disk' if have else 'download'} · "
            f"needs ~{human_bytes(pair.memory_bytes)} memory · ",
            style="dim",
        )
        if self.ram and pair.memory_bytes > self.ram:
            text.append(f"more than this machine's {human_bytes(self.ram)} · ", style="bold #d70000")
        text.append("✓ files present" if have else "⬇ download needed", style="#00af5f" if have else "#d78700")
        line = self.expected(pair) if self.expected and have else None
        if line:
            text.append(f"\n  {line}", style="#5f87af")
        if pair.good_for:
            text.append(f"\n  good for: {pair.good_for}", style="dim")
        return text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog pair-dialog"):
            yield Static("Choose a model pair  (Enter/Ctrl+O open · Esc cancel)", classes="dialog-title")
            yield OptionList(*[Option(self._pair_label(p), id=p.id) for p in self.catalog.pairs], id="pair-list")
            with Horizontal(classes="field-row"):
                yield Label("draft", classes="field-label")
                yield Select([("none (target alone)", "none")], allow_blank=False, id="draft-select")
            yield Static("", id="drafter-notes", classes="dim")
            with Horizontal(classes="field-row"):
                yield Label("max draft k", classes="field-label")
                yield Input(
                    "auto" if self.adaptive else str(self.draft_max),
                    id="max-k",
                    placeholder=f"auto or 0..{options.MAX_DRAFT}",
                )
                yield Label("p_min", classes="field-label")
                yield Input(str(self.p_min), id="p-min")
            yield Static("", id="pair-error")
            yield Button("Open", variant="primary", id="open")
        yield Footer()

    def on_mount(self) -> None:
        ol = self.query_one("#pair-list", OptionList)
        ids = [p.id for p in self.catalog.pairs]
        if self.selected in ids:
            ol.highlighted = ids.index(self.selected)
        elif ids:
            ol.highlighted = 0
        self._fill_drafts()
        ol.focus()

    @property
    def pair(self) -> Pair | None:
        ol = self.query_one("#pair-list", OptionList)
        if ol.highlighted is None:
            return None
        pair_id = ol.get_option_at_index(ol.highlighted).id  # each option's id is its pair's
        return self.catalog.get(pair_id) if pair_id is not None else None

    def _fill_drafts(self) -> None:
        pair = self.pair
        if pair is None:
            return
        options, why_not = drafters(pair, self.locate)
        notes = Text("\n".join(f"not offered: {line}" for line in why_not), style="dim")
        self.query_one("#drafter-notes", Static).update(notes)
        select = self.query_one("#draft-select", Select)
        select.set_options(options)
        values = [v for _, v in options]
        wanted = self.draft_choice if self.draft_choice in values else values[0]
        select.value = wanted

    @on(OptionList.OptionHighlighted, "#pair-list")
    def _highlighted(self) -> None:
        self._fill_drafts()

    @on(OptionList.OptionSelected, "#pair-list")
    def _selected(self) -> None:
        self.action_open()

    @on(Button.Pressed, "#open")
    def action_open(self) -> None:
        pair = self.pair
        if pair is None:
            return
        raw_k = self.query_one("#max-k", Input).value.strip().lower()
        try:
            adaptive = raw_k in ("", "auto")
            draft_max = self.draft_max if adaptive else options.parse("draft_max", raw_k, "max draft k")
            p_min = options.parse("p_min", self.query_one("#p-min", Input).value, "p_min")
        except options.OptionError as e:
            self.query_one("#pair-error", Static).update(Text(f"{e} ('auto' picks k itself)", style="red"))
            return
        value = self.query_one("#draft-select", Select).value
        if value == "mtp":
            draft, mode = None, "mtp"
        elif isinstance(value, str) and value.startswith("draft:"):
            name = value.split(":", 1)[1]
            draft = next(d for d in compatible_drafts(pair) if d.filename == name)
            mode = "draft"
        else:
            draft, mode = None, str(value)
        self.dismiss(PairChoice(pair.id, draft, mode, draft_max, adaptive, p_min))
