"""Can this draft model propose tokens for that target? One rule, used by the engine's loader,
by ``localspec models check`` and by the pair menu.

Follows llama.cpp's ``common_speculative_are_compatible``: same vocab type, same BOS/EOS ids
and add-BOS/EOS flags, vocab sizes within 128, identical token text on the shared ids. Where
only *special/control* tokens differ, the pair is still usable: the draft is banned from
proposing those ids (``Compatibility.banned_draft_ids``) so it never suggests a token whose
meaning differs in the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_VOCAB_DIFF = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
MAX_LISTED = 5  # differing ids named in a message


@dataclass(frozen=True)
class VocabInfo:
    """What the rule needs to know of one model's vocabulary."""

    vocab_type: str  # "spm", "bpe", "wpm", ...
    n_vocab: int
    bos: int | None
    eos: int | None
    add_bos: bool
    add_eos: bool
    tokens: Sequence[bytes]  # token text by id
    special: frozenset[int] = field(default_factory=frozenset)  # control / user-defined ids


@dataclass(frozen=True)
class Compatibility:
    problems: tuple[str, ...]
    banned_draft_ids: frozenset[int]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        if self.ok:
            return "compatible" + ("".join(f"\n  note: {n}" for n in self.notes))
        return "incompatible draft:\n" + "\n".join(f"  - {p}" for p in self.problems)


def check_compatible(target: VocabInfo, draft: VocabInfo) -> Compatibility:
    problems: list[str] = []
    notes: list[str] = []
    if target.vocab_type != draft.vocab_type:
        problems.append(f"vocab type differs: target {target.vocab_type}, draft {draft.vocab_type}")
    for what in ("bos", "eos", "add_bos", "add_eos"):
        a, b = getattr(target, what), getattr(draft, what)
        if a != b:
            problems.append(f"{what.upper()} differs: target {a}, draft {b}")
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_DIFF:
        problems.append(
            f"vocab sizes differ by {diff} (> {MAX_VOCAB_DIFF}): target {target.n_vocab}, draft {draft.n_vocab}"
        )
        return Compatibility(tuple(problems), frozenset(), tuple(notes))
    banned = set(range(target.n_vocab, draft.n_vocab))
    differing = []
    for i in range(min(target.n_vocab, draft.n_vocab)):
        if target.tokens[i] == draft.tokens[i]:
            continue
        if i in target.special or i in draft.special:
            banned.add(i)
        else:
            differing.append(i)
    if differing:
        shown = ", ".join(f"{i}: {target.tokens[i]!r} vs {draft.tokens[i]!r}" for i in differing[:MAX_LISTED])
        more = f" (and {len(differing) - MAX_LISTED} more)" if len(differing) > MAX_LISTED else ""
        problems.append(f"{len(differing)} token(s) have different text: {shown}{more}")
    if banned and not problems:
        notes.append(f"the draft will never propose {len(banned)} id(s) that differ or exceed the target vocab")
    return Compatibility(tuple(problems), frozenset(banned), tuple(notes))
