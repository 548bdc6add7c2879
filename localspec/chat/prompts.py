"""A conversation as the target's tokens: its chat template around contents tokenized as plain
text, so no message can forge the template's markup (``template_tokens``)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence


def prompt_tokens(target, messages: Sequence[dict], raw: bool = False) -> list[int]:
    """The conversation as the target's tokens: its chat template around contents that are
    plain text (``template_tokens``), or with ``raw`` the text as written, special tokens
    in it parsed (``--raw`` and ``/v1/completions`` send a prompt in the model's own markup)."""
    if raw:
        return target.tokenize("".join(m["content"] for m in messages))
    return template_tokens(target, messages)


def template_tokens(target, messages: Sequence[dict]) -> list[int]:
    """The chat template's tokens, where only the template's own markup is special: a message
    holding ``<|im_end|>`` must not end its turn and forge a system or assistant turn of its
    own, so message contents are tokenized as text.

    The markup is what the template renders with every content replaced by a marker no text
    holds. When the special tokens of the whole prompt are exactly the markup's, no content
    added one, and the prompt is tokenized whole as llama.cpp's server would (the same
    tokens as ever). Otherwise it is tokenized piece by piece: markup with special tokens
    parsed, each content as plain text."""
    ids = target.tokenize(target.apply_chat_template(messages), add_bos=False)
    pieces = template_pieces(target, messages)
    # a private-use character between markup pieces, as the markers stood: it joins no tokens
    markup = target.tokenize("\ue000".join(text for text, literal in pieces if not literal), add_bos=False)
    special = lambda tokens: [t for t in tokens if target.is_special(t)]
    if special(ids) == special(markup):
        return ids
    return literal_tokens(target, pieces)


def literal_tokens(target, pieces: Sequence[tuple[str, bool]]) -> list[int]:
    """``pieces`` tokenized as llama.cpp tokenizes a whole text, but with special tokens
    parsed in the markup only: it splits the text at special tokens and tokenizes each run
    of text between them on its own (an SPM vocabulary's space prefix starts each run), so a
    run here is the markup's text before or after its special tokens joined with the contents
    beside it, and the tokens are the whole text's wherever no content holds markup."""
    out: list[int] = []
    run: list[str] = []  # the text since the last special token

    def end_run() -> None:
        if any(run):
            out.extend(target.tokenize("".join(run), add_bos=False, special=False))
        run.clear()

    for text, literal in pieces:
        if literal:
            run.append(text)
            continue
        at = 0
        for token in filter(target.is_special, target.tokenize(text, add_bos=False)):
            piece = target.token_text(token).decode("utf-8", "replace")
            found = text.find(piece, at)
            if found >= 0:  # (not found: text llama.cpp matched otherwise; the token keeps its place)
                run.append(text[at:found])
                at = found + len(piece)
            end_run()
            out.append(token)
        run.append(text[at:])
    end_run()
    return out


def template_pieces(target, messages: Sequence[dict]) -> list[tuple[str, bool]]:
    """The rendered template as (text, is_content) pieces in order: the markup around each
    content, and the content itself. The masked render holds no message text at all, so
    nothing a user writes can pass for markup; markers are private-use characters around a
    fresh nonce, which no template writes, and which a template that trims its contents
    leaves whole."""
    nonce = secrets.token_hex(8)
    marker = lambda i: f"\ue000{nonce}:{i}\ue001"
    masked = [{**m, "content": marker(i)} for i, m in enumerate(messages)]
    parts = re.split(f"\ue000{nonce}:(\\d+)\ue001", target.apply_chat_template(masked))
    pieces = []
    for i, part in enumerate(parts):
        pieces.append((messages[int(part)]["content"], True) if i % 2 else (part, False))
    return pieces
