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

from ..config import MAX_LOOKUP_MATCH as MAX_MATCH  # longer suffixes add little, each a scan


def lookup_drafts(tokens: list[int], k: int, min_match: int) -> list[int]:
    """The k drafts following the latest earlier occurrence of the longest suffix of
    `tokens` (from MAX_MATCH down to min_match tokens); [] where none occurred."""
    end = len(tokens)
    for n in range(max(MAX_MATCH, min_match), min_match - 1, -1):
        if end <= n:
            continue
        tail = tokens[end - n :]
        first = tail[0]
        for s in range(end - n - 1, -1, -1):
            if tokens[s] == first and tokens[s : s + n] == tail:
                return continuation(tokens, s + n, k)
    return []


def continuation(tokens: list[int], start: int, k: int) -> list[int]:
    """k tokens from `start`; past the row's end they repeat from `start` on (the stretch
    between the match and the row's end is a period)."""
    out = tokens[start : start + k]
    period = len(tokens) - start  # at least 1: a match ends before the row's last token
    while len(out) < k:
        out.append(out[len(out) - period])
    return out
