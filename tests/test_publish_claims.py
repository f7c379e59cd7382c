"""Claims: parsing stated figures and judging them against recomputed values."""

import math
from dataclasses import replace

import pytest

from runner.publish.stats.claims import ClaimSyntaxError, Measured, claim_link, judge, parse_stated


def change(value, lo=None, hi=None):
    return Measured(
        value,
        value if lo is None else lo,
        value if hi is None else hi,
        2,
        "change",
        "decode_tps of on vs off",
    )


@pytest.mark.parametrize(
    "stated,lo,hi",
    [
        ("+25%", 0.245, 0.255),
        ("-3.5%", -0.0355, -0.0345),
        ("82%", 0.815, 0.825),
        ("1,234", 1233.5, 1234.5),
        ("97.4 tok/s", 97.35, 97.45),
        ("126", 125.5, 126.5),
    ],
)
def test_stated_rounding_interval(stated, lo, hi):
    s = parse_stated(stated, "value")
    assert s.lo == pytest.approx(lo) and s.hi == pytest.approx(hi)


def test_times_suffix_against_a_change_is_one_plus_the_change():
    s = parse_stated("1.3x", "change")
    assert (s.lo, s.hi) == pytest.approx((0.25, 0.35))
    assert judge(1, "1.3x", change(0.31), None).ok
    assert not judge(1, "1.3x", change(0.36), None).ok


def test_within_rounding_passes_and_outside_fails():
    assert judge(1, "+25%", change(0.2549), 3).ok
    bad = judge(1, "+25%", change(0.2551), 3)
    assert not bad.ok and "outside" in bad.reason
    assert not judge(1, "-25%", change(0.25), 3).ok  # the sign is part of the claim


def test_the_interval_widens_the_tolerance():
    wide = change(0.22, lo=0.19, hi=0.251)  # the interval holds the stated 25%
    v = judge(2, "+25%", wide, 7)
    assert v.ok and "interval" in v.reason
    narrow = change(0.22, lo=0.19, hi=0.246)  # reaches its rounding, not the value
    assert not judge(2, "+25%", narrow, 7).ok


def test_a_direction_needs_an_interval_that_excludes_no_change():
    assert judge(1, "+25%", change(0.25, lo=0.2, hi=0.3), 1).ok
    v = judge(1, "+25%", change(0.25, lo=-0.01, hi=0.5), 1)
    assert not v.ok and "includes no change" in v.reason
    v = judge(1, "-3%", change(-0.03, lo=-0.17, hi=0.12), 1)
    assert not v.ok and "includes no change" in v.reason
    ratio = Measured(1.5, 0.9, 2.0, 3, "ratio", "r")
    assert "includes no change" in judge(1, "1.50x", ratio, 1).reason
    assert judge(1, "1.0x", Measured(1.02, 0.9, 1.1, 3, "ratio", "r"), 1).ok  # not a direction
    no_interval = Measured(0.25, None, None, 1, "change", "one round")
    assert not judge(1, "+25%", no_interval, 1).ok


def test_level_holds_only_when_the_whole_interval_lies_within_the_band():
    from dataclasses import replace

    assert judge(1, "level", change(-0.03, lo=-0.08, hi=0.09), 1).ok
    assert judge(1, "\u00b10%", change(0.01, lo=-0.02, hi=0.04), 1).ok
    wide = judge(1, "level", change(-0.03, lo=-0.17, hi=0.12), 1)  # includes no change, reaches past 10%
    assert not wide.ok and wide.reason.startswith("undecided: the interval reaches past \u00b110%")
    assert "rounds would decide it" in wide.reason
    assert judge(1, "level", replace(change(-0.03, lo=-0.17, hi=0.12), band=0.2), 1).ok  # a wider band
    assert not judge(1, "level", replace(change(0.0, lo=-0.06, hi=0.06), band=0.05), 1).ok
    v = judge(1, "level", change(0.3, lo=0.28, hi=0.33), 1)
    assert not v.ok and "excludes no change" in v.reason
    assert judge(1, "level", change(0.03, lo=0.01, hi=0.05), 1).ok  # a small, clear change is level
    assert not judge(1, "level", Measured(5.0, 4.0, 6.0, 2, "value", "m"), 1).ok
    assert not judge(1, "level", Measured(0.0, None, None, 1, "change", "m"), 1).ok


def test_a_level_claim_is_shown_with_its_band():
    html = str(claim_link(judge(2, "level", change(0.0, lo=-0.05, hi=0.05), 1)))
    assert ">level (within \u00b110%)</a>" in html and "claim-failed" not in html


def test_a_floor_holds_only_when_the_whole_interval_lies_at_or_above_it():
    # adaptive against off at four sequences: "never below 0.97x" (issue 39's bar)
    assert judge(1, "at least -3%", change(0.06, lo=-0.02, hi=0.19), 1).ok  # not level (+19%), yet a floor
    v = judge(1, "at least -3%", change(-0.037, lo=-0.085, hi=0.013), 1)
    assert not v.ok and v.reason.startswith("undecided: the interval reaches both sides of -3%")
    assert "rounds would decide it" in v.reason
    refuted = judge(1, "at least -3%", change(-0.10, lo=-0.15, hi=-0.05), 1)
    assert not refuted.ok and refuted.reason.startswith("refuted: the whole interval lies below -3%")
    ratio = Measured(1.02, 0.975, 1.06, 12, "ratio", "r")
    assert judge(1, "at least 0.97x", ratio, 1).ok and judge(1, "\u2265 0.97x", ratio, 1).ok
    assert not judge(1, ">= 0.98x", ratio, 1).ok
    assert "a percentage needs gain()" in judge(1, "at least -3%", ratio, 1).reason


def test_a_ceiling_and_a_value_bound_and_their_failures():
    latency = Measured(48.0, 45.0, 51.0, 6, "value", "ttft_ms")
    assert judge(1, "at most 52 ms", latency, 1).ok and judge(1, "<= 51", latency, 1).ok
    assert not judge(1, "at most 50 ms", latency, 1).ok
    assert judge(1, "at least 45", latency, 1).ok and not judge(1, "at least 46", latency, 1).ok
    assert judge(1, "at most +5%", change(0.01, lo=-0.03, hi=0.04), 1).ok
    no_interval = judge(1, "at least -3%", Measured(0.1, None, None, 1, "change", "m"), 1)
    assert not no_interval.ok and "a bound needs an interval" in no_interval.reason
    assert "not a number" in judge(1, "at least a little", change(0.25), 1).reason


def test_a_floor_on_a_comparison_must_clear_the_aa_margin():
    aa = math.log1p(0.02)  # identical arms' intervals reached 2% from no change
    near = replace(change(0.02, lo=-0.02, hi=0.06), margin=aa)
    v = judge(1, "at least -3%", near, 1)  # 1% above the floor: not clear of it by 2%
    assert not v.ok and "A/A margin" in v.reason and v.reason.startswith("undecided")
    assert judge(1, "at least -3%", replace(change(0.05, lo=0.0, hi=0.1), margin=aa), 1).ok


def test_unparseable_stated_and_missing_data_fail_with_reasons():
    with pytest.raises(ClaimSyntaxError):
        parse_stated("about a quarter", "change")
    assert "not a number" in judge(1, "about a quarter", change(0.25), 1).reason
    missing = Measured(None, None, None, 0, "change", "x")
    assert judge(1, "+25%", missing, 1).reason == "no data behind this claim"


def test_claim_link_escapes_the_stated_text():
    html = str(claim_link(judge(3, "<script>x</script>", change(0.25), 1)))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'href="#audit-claim-3"' in html and "bothrows-claim-failed" in html


def test_a_dropped_value_does_not_lend_its_cells_to_a_later_one():
    """Values are keyed by id while a post renders; one rendered and dropped must not free
    its id for a later value, which would then stand on its cells (or its missing reason)."""
    from runner.publish.blocks.post_state import PostState

    state = PostState("p", "t")
    for i in range(50):
        state.remember(Measured(float(i), None, None, 1, "value", f"v{i}"), cells={("e", "c", "a", i)})
        state.remember(Measured(None, None, None, 0, "value", f"m{i}"), missing=f"reason {i}")
    assert len(state.cells_of) == 50 and len(state.missing_of) == 50
    assert {next(iter(c))[-1] for c in state.cells_of.values()} == set(range(50))
