"""The four verdicts (`verdicts.decide`), the t distribution behind a sequential design's
wider intervals (`student.py`), and the declaration keys that set them."""

from __future__ import annotations

import math

import pytest

from runner.experiments.declaration import DeclarationError, parse
from runner.experiments.validation.sequential import parse_duration
from runner.publish.stats.intervals import t975
from runner.publish.stats.sequential import critical, looks
from runner.publish.stats.student import central_mass, two_sided_critical
from runner.publish.stats.verdicts import HIGHER, LEVEL, LOWER, UNDECIDED, decide, decide_bound, parse_band


def test_four_verdicts_from_an_interval_and_a_band():
    assert decide(-0.05, 0.08, 3, "change", 0.10).kind == LEVEL
    assert decide(0.20, 0.50, 3, "change", 0.10).kind == HIGHER
    assert decide(-0.50, -0.20, 3, "change", 0.10).kind == LOWER
    assert decide(-0.86, 5.736, 2, "change", 0.10).kind == UNDECIDED  # the flagship's old "level"
    assert decide(0.95, 1.08, 3, "ratio", 0.10).kind == LEVEL
    assert decide(None, None, 1, "change", 0.10) is None
    assert decide(0.1, 0.2, 3, "value", 0.10) is None


def test_a_direction_must_clear_the_aa_margin_or_stays_undecided():
    assert decide(0.12, 0.30, 3, "change", 0.10, margin=0.0).kind == HIGHER
    blocked = decide(0.12, 0.30, 3, "change", 0.10, margin=math.log1p(0.15))
    assert blocked.kind == UNDECIDED and blocked.rounds_to_decide is not None
    at = decide(0.12, 0.30, 3, "change", 0.10, margin=math.log1p(0.12))  # lying exactly at it
    assert at.kind == UNDECIDED


def test_undecided_estimates_more_rounds_the_wider_it_is():
    narrow = decide(-0.05, 0.15, 3, "change", 0.10).rounds_to_decide
    wide = decide(-0.30, 0.50, 3, "change", 0.10).rounds_to_decide
    assert 3 < narrow < wide


def test_words_follow_the_metric():
    assert decide(0.2, 0.5, 3, "change", 0.1).word("tok/s") == "faster"
    assert decide(0.2, 0.5, 3, "change", 0.1).word("ms") == "slower"
    assert decide(0.2, 0.5, 3, "change", 0.1).word("") == "higher"
    assert decide(-0.05, 0.05, 3, "change", 0.1).word("tok/s") == "level (within \u00b110%)"


def test_a_bound_is_decided_on_its_own_side_and_undecided_across_it():
    assert decide_bound(-0.02, 0.19, 24, "change", -0.03, at_least=True).holds is True
    assert decide_bound(-0.15, -0.05, 24, "change", -0.03, at_least=True).holds is False
    across = decide_bound(-0.085, 0.013, 24, "change", -0.03, at_least=True)
    assert across.holds is None and across.rounds_to_decide > 24
    further = decide_bound(-0.085, 0.013, 24, "change", -0.06, at_least=True)
    assert further.rounds_to_decide < across.rounds_to_decide  # the farther the centre, the sooner
    assert decide_bound(0.95, 0.99, 3, "ratio", 1.0, at_least=False).holds is True  # at most 1.0x
    assert decide_bound(10.0, 12.0, 3, "value", 12.0, at_least=False).holds is True  # at the bound holds
    assert decide_bound(None, None, 1, "change", 0.0, at_least=True) is None


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 10, 11, 30])
def test_the_t_critical_value_matches_the_fixed_table_at_95_percent(df):
    assert two_sided_critical(0.95, df) == pytest.approx(t975(df), abs=2e-3)
    assert central_mass(two_sided_critical(0.99, df), df) == pytest.approx(0.99, abs=1e-9)


def test_a_sequential_design_widens_every_look():
    s = looks(3, 12)
    assert critical(3, s) > t975(2) and critical(12, s) > t975(11)
    assert critical(12, s) < critical(6, s) < critical(3, s)


def test_bands_and_durations_parse_or_say_no():
    assert parse_band("10%") == pytest.approx(0.10) and parse_band("2.5%") == pytest.approx(0.025)
    assert parse_band("10") is None and parse_band("0%") is None and parse_band("120%") is None
    assert parse_duration("20m") == 1200 and parse_duration("1h30m") == 5400 and parse_duration("90s") == 90
    assert parse_duration("soon") is None and parse_duration("0m") is None and parse_duration(20) is None


BASE = """title = "t"
model = "tiny"
seed = 1
rounds = 3
concurrency = [1]
{extra}
[workload]
prompts = "heldout"
requests_per_client = 1
prompt_tokens = [16, 32]
max_new_tokens = 4

[engine]
max_batch_size = 1

[arms.a]
mtp = false
"""


def test_the_design_keys_round_trip_and_set_the_looks():
    extra = 'equivalence = "5%"\nmax_rounds = 12\nbudget = "20m"\ncontention_limit = "off"\nrestart_every = 4'
    exp = parse(BASE.format(extra=extra).encode(), source="x.toml", name="x")
    design = (exp.equivalence, exp.max_rounds, exp.budget_s, exp.contention_limit, exp.restart_every)
    assert design == (0.05, 12, 1200, None, 4)
    assert exp.schedule == (3, 6, 12) and exp.looks_text == "3,6,12"
    again = parse(exp.to_toml().encode(), source="y.toml", name="x")
    assert (
        again.equivalence,
        again.max_rounds,
        again.budget_s,
        again.contention_limit,
        again.restart_every,
    ) == design
    fixed = parse(BASE.format(extra="").encode(), source="x.toml", name="x")
    assert (
        fixed.schedule == (3,) and fixed.looks_text is None and fixed.until_decided().schedule == (3, 6, 12)
    )


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        ('equivalence = "ten"', "equivalence", "percentage"),
        ("equivalence = 0.1", "equivalence", "percentage"),
        ("max_rounds = 2", "max_rounds", "at least rounds (3)"),
        ('budget = "soon"', "budget", "duration"),
        ('contention_limit = "high"', "contention_limit", "percentage"),
        ("restart_every = 0", "restart_every", ">= 1"),
        ('restart_every = "often"', "restart_every", "integer"),
    ],
)
def test_bad_design_keys_name_the_file_key_and_value(extra, key, words):
    with pytest.raises(DeclarationError) as e:
        parse(BASE.format(extra=extra).encode(), source="x.toml", name="x")
    [issue] = e.value.issues
    assert (issue.file, issue.key) == ("x.toml", key) and words in issue.reason


def test_a_later_measurement_note_counts_its_undecided_claims():
    """A note says how many claims hold there and how many its data decides nothing about."""
    from runner.publish.blocks.notes import measurement_note

    note = measurement_note("2026-12-03", "AMD EPYC, 2 cores", "abc", "exp", 4, 1, 3, undecided=2)
    assert note.clauses[-1].text == "1 of 3 claims that read these cells hold there, 2 undecided"
    plain = measurement_note("2026-12-03", "AMD EPYC, 2 cores", "abc", "exp", 4, 1, 3)
    assert plain.clauses[-1].text == "1 of 3 claims that read these cells hold there"
