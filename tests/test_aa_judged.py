"""A post's A/A margin comes from the data it judges: a later measurement whose A/A copy
drifted moves the newest data's margin, never that of a post pinned to (or dated before)
the earlier one. Its provenance still shows the A/A over all the data."""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from types import SimpleNamespace

import duckdb
import pytest
from fixture_db import DECLARATION, FixtureChip, build_fixture, complete_runs
from publish_project import build_site, write_project

from runner.experiments.until_decided import Comparison, judge_look
from runner.publish.sql.home import Cutoff
from runner.publish.sql.reader import Reader
from runner.publish.stats import aa
from runner.store import measurements
from runner.store.store import Store

X = FixtureChip("Fixture X", 100.0)
FIRST_DAY, LATER_DAY = datetime(2026, 11, 20), datetime(2026, 11, 23)
COMMON = dict(
    chips=(X,),
    arms=("a", "b", "a-aa"),
    concurrencies=(1,),
    rounds=3,
    requests_per_client=6,
    run_noise=0.002,
    passes_per_run=8,
)
POST = """\
---
date: {date}
experiment: spec-fixture
{pin}---
# b against a

{{{{ claim("+10%", gain("decode_tps", arm="b", base="a", concurrency=1)) }}}}

{{{{ regime_table(["decode_tps"]) }}}}
"""


def _measure_twice(work, first_factors: dict, later_factors: dict, **first) -> tuple[str, str]:
    """The fixture measured on the first day, then again (seed 5) three days later, each
    written to its own measurement folder under `work`; returns the two folders' names.
    `first`: the first measurement's settings over COMMON."""
    db, root = work / "build" / "runs.duckdb", work / "measurements"
    root.mkdir()
    build_fixture(db, day=FIRST_DAY, factors=first_factors, **{**COMMON, **first})
    first_runs = complete_runs(db)
    with Store.open(db) as st:
        [first_folder] = measurements.write_runs(st, first_runs, root)
    build_fixture(db, day=LATER_DAY, factors=later_factors, seed=5, add=True, **COMMON)
    later_runs = complete_runs(db) - first_runs
    with Store.open(db) as st:
        [later_folder] = measurements.write_runs(st, later_runs, root)
    return first_folder.name, later_folder.name


@pytest.fixture(scope="module")
def two_measurements(tmp_path_factory):
    """Folders: X measured on the first day, its copy within noise of a; then all of it
    measured again three days later, the copy 30% faster (a machine drifting between
    the arms). Returns (work folder, first folder, later folder)."""
    work = tmp_path_factory.mktemp("aa-judged")
    first, later = _measure_twice(work, {"a": 1.0, "b": 1.1, "a-aa": 1.0}, {"a": 1.0, "b": 1.1, "a-aa": 1.3})
    return work, first, later


def _site(work, tmp_path, date: str, pin: str):
    data = tmp_path / "data"
    shutil.copytree(work / "measurements", data / "measurements")
    config = write_project(tmp_path, data / "runs.duckdb", {"p.md": POST.format(date=date, pin=pin)})
    result = build_site(config)
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    return result, html, data / "runs.duckdb"


def _decode_margin(coverage: dict) -> float:
    (covs,) = coverage.values()
    return next(c.margin for c in covs if c.metric == "decode_tps")


def test_coverage_over_a_cut_reads_only_that_data(two_measurements, tmp_path):
    work, first, later = two_measurements
    db = _site(work, tmp_path, "2026-11-20", f"data: [{first}]\n")[2]
    with Reader(db) as reader:
        every = aa.coverage(reader, "spec-fixture")
        pinned = aa.coverage(reader, "spec-fixture", cut=Cutoff(None, data=(first,)))
        drifted = aa.coverage(reader, "spec-fixture", cut=Cutoff(None, data=(later,)))
        dated = aa.coverage(reader, "spec-fixture", cut=Cutoff(datetime(2026, 11, 21)))
    assert _decode_margin(pinned) == 0.0 == _decode_margin(dated)  # the first day's copy covers
    assert 0.2 < _decode_margin(drifted) < 0.3  # log(1.3) is 0.26: the later copy's drift
    assert _decode_margin(every) == _decode_margin(drifted)  # all repetitions: the widest counts


@pytest.mark.parametrize("pin", ["pinned", "dated"])
def test_a_later_drifted_aa_never_moves_an_earlier_posts_margin(two_measurements, tmp_path, pin):
    work, first, _ = two_measurements
    # pinned to the first folder, or unpinned and dated the first day: b's +10% over a holds
    result, html, _ = _site(work, tmp_path, "2026-11-20", f"data: [{first}]\n" if pin == "pinned" else "")
    assert result.ok, result.warnings
    assert re.search(r'bothrows-verdict-higher" title="the 95% interval excludes no change"', html)
    # the provenance shows the A/A over all the data, the drifted repetition included, and
    # beside it the A/A the claims were judged against
    assert "decode_tps 1 of 2 cells include no change" in html
    what = "the measurement folders it pins" if pin == "pinned" else "its data as of its date"
    line = re.search(rf"Claims on Fixture X judged on {what} meet the A/A of that data alone: ([^<]*)<", html)
    assert line and "must clear" not in line.group(1), line


def test_a_post_on_the_drifted_measurement_needs_its_margin(two_measurements, tmp_path):
    work, _, later = two_measurements
    result, html, _ = _site(work, tmp_path, "2026-11-23", f"data: [{later}]\n")
    assert not result.ok  # +10% does not clear the later data's own A/A margin of about 26%
    assert any("does not clear the A/A margin" in w for w in result.warnings), result.warnings
    assert re.search(
        r"judged on the measurement folders it pins meet the A/A of that data alone: [^<]*"
        r"a claimed direction there must clear: [^<]*decode_tps \u00b1",
        html,
    )


def test_a_look_of_measuring_until_decided_reads_its_own_declarations_aa(tmp_path):
    # The drifted measurement ran under an earlier version of the declaration: a look at
    # the current one judges b against a with the margin of its own runs' A/A (none).
    db = tmp_path / "runs.duckdb"
    build_fixture(db, day=FIRST_DAY, factors={"a": 1.0, "b": 1.1, "a-aa": 1.3}, **COMMON)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE runs SET declaration_sha256 = 'e' || declaration_sha256[2:]")
    build_fixture(db, day=LATER_DAY, factors={"a": 1.0, "b": 1.1, "a-aa": 1.0}, seed=5, add=True, **COMMON)
    with Reader(db) as reader:
        (chip,) = [c.chip_id for c in reader.chips("spec-fixture", False)]
    exp = SimpleNamespace(name="spec-fixture", quick=False, sha256=DECLARATION, equivalence=0.05)
    (judged,) = judge_look(db, exp, chip, [Comparison("b", "a", "decode_tps", (1,))])
    assert judged.kind == "higher", judged


def test_a_post_whose_folders_hold_no_aa_pair_says_its_claims_clear_no_margin(tmp_path):
    # The copy was measured only later: the post's own folder has no A/A pair to judge by.
    first, _ = _measure_twice(
        tmp_path, {"a": 1.0, "b": 1.1}, {"a": 1.0, "b": 1.1, "a-aa": 1.3}, arms=("a", "b")
    )
    result, html, _ = _site(tmp_path, tmp_path / "site", "2026-11-20", f"data: [{first}]\n")
    assert result.ok, result.warnings
    assert (
        "Claims judged on the measurement folders it pins clear no A/A margin: that data holds no A/A pair"
        in html
    )
