"""Drafts looked up in a row's own tokens: where its last few tokens occurred earlier (in
its prompt or its output), the tokens that followed them there are the next drafts.

- Code repeats itself (names, call shapes, whole lines), and a small block drafter never
  saw the names of text outside its training corpus. Where the row's last `min_match` or
  more tokens occurred before, what followed lands more often than the block drafter's
  drafts (`runner bench --mtp` measures both; the lookup-drafting post has the figures),
  and the lookup costs no drafter pass, only a scan of the row's tokens on the host.
- The longest match wins (up to MAX_MATCH tokens), and among equally long ones the latest:
  the row's nearest context is its likeliest continuation. A continuation that runs into
  the row's end repeats the matched stretch forward (a period), so a row always gets
  k drafts from a match.
- Greedy rows only (the drafts are verified like any other; a sampling row would need a
  distribution per draft), and only under the block drafter (`draft_lookup`, config.py).
"""

from __future__ import annotations

from typing import Optional

from ..config import MAX_LOOKUP_MATCH as MAX_MATCH  # longer suffixes add little, each a search


def as_text(tokens: list[int]) -> str:
    """Tokens as a str, a code point a token: str.rfind then searches them in C, where a
    Python loop over a long row's tokens would cost every pass far more."""
    return "".join(map(chr, tokens))


def lookup_drafts(tokens: list[int], k: int, min_match: int, text: Optional[str] = None) -> list[int]:
    """The k drafts following the latest earlier occurrence of the longest suffix of
    `tokens` (from MAX_MATCH down to min_match tokens); [] where none occurred. text: the
    tokens as `as_text` gives them, where the caller keeps it (RowTexts)."""
    text = as_text(tokens) if text is None else text
    end = len(text)
    for n in range(max(MAX_MATCH, min_match), min_match - 1, -1):
        if end <= n:
            continue
        s = text.rfind(text[end - n :], 0, end - 1)  # an occurrence ending before the last token
        if s >= 0:
            return continuation(tokens, s + n, k)
    return []


class RowTexts:
    """Each row's tokens as text, extended by what the row committed since the last lookup
    (a row's tokens only grow), so a pass's lookup does not convert its whole row again.
    A copy of the row's tokens, which are not counted as drafter state either."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}

    def of(self, row: int, tokens: list[int]) -> str:
        text = self._texts.get(row, "")
        if len(text) < len(tokens):
            text = self._texts[row] = text + as_text(tokens[len(text) :])
        return text

    def drop(self, row: int) -> None:
        self._texts.pop(row, None)


def continuation(tokens: list[int], start: int, k: int) -> list[int]:
    """k tokens from `start`; past the row's end they repeat from `start` on (the stretch
    between the match and the row's end is a period)."""
    out = tokens[start : start + k]
    period = len(tokens) - start  # at least 1: a match ends before the row's last token
    while len(out) < k:
        out.append(out[len(out) - period])
    return out
