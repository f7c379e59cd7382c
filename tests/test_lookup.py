"""Drafts looked up in a row's own tokens (runner/engine/drafting/lookup.py): the longest
suffix match wins, then the latest; a continuation that reaches the row's end repeats
forward; no match, no drafts; and `draft_lookup` is checked as a knob."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.engine.config import EngineConfig
from runner.engine.drafting.lookup import MAX_MATCH, continuation, lookup_drafts


def test_the_latest_earlier_occurrence_gives_what_followed_it():
    tokens = [1, 2, 3, 10, 11, 1, 2, 3, 20, 21, 22, 23, 9, 1, 2, 3]
    assert lookup_drafts(tokens, 3, min_match=3) == [20, 21, 22]


def test_a_longer_match_wins_over_a_later_shorter_one():
    # "5 2 3" occurred early (then 40 ...); only "2 3" occurred later (then 60 ...)
    tokens = [5, 2, 3, 40, 41, 42, 2, 3, 60, 61, 62, 7, 5, 2, 3]
    assert lookup_drafts(tokens, 2, min_match=2) == [40, 41]
    assert lookup_drafts(tokens[3:], 2, min_match=2) == [60, 61]  # the early one gone


def test_no_match_of_the_needed_length_gives_no_drafts():
    tokens = [1, 2, 3, 4, 9, 8, 7, 3, 4]
    assert lookup_drafts(tokens, 4, min_match=3) == []
    assert lookup_drafts(tokens, 4, min_match=2) == [9, 8, 7, 3]
    assert lookup_drafts([], 4, min_match=1) == [] and lookup_drafts([7], 4, min_match=1) == []


def test_a_continuation_that_reaches_the_end_repeats_its_period():
    # "a b c" repeating: the latest earlier "b c" is three back, followed by "a" then the end
    tokens = [1, 2, 3, 1, 2, 3, 1, 2, 3]
    assert lookup_drafts(tokens, 7, min_match=2) == [1, 2, 3, 1, 2, 3, 1]
    assert continuation([4, 4, 4], 2, 5) == [4, 4, 4, 4, 4]


@given(
    tokens=st.lists(st.integers(0, 3), min_size=0, max_size=40),
    k=st.integers(1, 9),
    min_match=st.integers(1, MAX_MATCH),
)
def test_drafts_follow_a_real_earlier_occurrence(tokens, k, min_match):
    """Whatever it returns is k tokens that would follow a match of at least min_match
    tokens if the text went on as it did after the occurrence found."""
    drafts = lookup_drafts(tokens, k, min_match)
    if not drafts:
        return
    assert len(drafts) == k
    extended = tokens + drafts
    end = len(tokens)
    found = [
        n
        for n in range(min_match, min(MAX_MATCH, end - 1) + 1)
        for s in range(end - n)
        if tokens[s : s + n] == tokens[end - n :] and extended[s + n : s + n + k] == drafts
    ]
    assert found


def test_the_knob_is_checked():
    assert EngineConfig(mtp=True, drafter="block", draft_lookup=3).draft_lookup == 3
    for bad in (-1, MAX_MATCH + 1, True, 2.0):
        with pytest.raises(ValueError, match="draft_lookup"):
            EngineConfig(mtp=True, drafter="block", draft_lookup=bad)
    with pytest.raises(ValueError, match="draft_lookup.*drafter = 'block'"):
        EngineConfig(mtp=True, drafter="mtp", draft_lookup=3).check_together()
