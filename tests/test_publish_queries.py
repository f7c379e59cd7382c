"""The page queries against real DuckDB files written through the Store API."""

from datetime import datetime

import duckdb
import pytest
from fixture_db import DEFAULT_CHIPS, EXPERIMENT, build_fixture, remeasure

from runner.publish.metrics import ACCEPTANCE_METRICS, METRICS
from runner.publish.sql.pages import CELLS_SQL, inline_sql
from runner.publish.sql.reader import QueryError, Reader


def _by_hand(path, class_id, arm, conc):
    """decode_tps and acceptance of one cell (of a machine class: pages' chips) recomputed
    row by row, in Python."""
    con = duckdb.connect(str(path), read_only=True)
    runs = [
        r
        for (r,) in con.execute(
            "SELECT run_id FROM runs JOIN chips USING (chip_id) WHERE class_id=? AND arm=? AND concurrency=?"
            " AND status='complete' AND experiment=?",
            [class_id, arm, conc, EXPERIMENT],
        ).fetchall()
    ]
    decode, accept = [], []
    for run in runs:
        reqs = con.execute(
            "SELECT output_tokens, first_token_ns, done_ns FROM requests WHERE run_id=?", [run]
        ).fetchall()
        speeds = [(o - 1) * 1e9 / (d - f) for o, f, d in reqs if o > 1]
        decode.append(sum(speeds) / len(speeds))
        drafted, accepted = con.execute(
            "SELECT sum(drafted), sum(accepted) FROM passes WHERE run_id=?", [run]
        ).fetchone()
        accept.append(accepted / drafted if drafted else None)
    con.close()
    return decode, accept


def test_cell_metrics_match_a_row_by_row_recomputation(fixture_db):
    with Reader(fixture_db) as r:
        chip = r.chips(EXPERIMENT, False)[0].chip_id
        cells = {(c.chip_id, c.arm, c.concurrency, c.metric): c for c in r.cells(EXPERIMENT, False)}
    decode, accept = _by_hand(fixture_db, chip, "on", 2)
    d = cells[(chip, "on", 2, "decode_tps")]
    assert d.mean == pytest.approx(sum(decode) / 2) and d.n_rounds == 2
    assert (d.lo, d.hi) == pytest.approx((min(decode), max(decode)))
    a = cells[(chip, "on", 2, "acceptance")]
    assert a.mean == pytest.approx(sum(accept) / 2)
    assert (chip, "off", 2, "acceptance") not in cells  # nothing drafted: no acceptance
    # no SLO declared; the fixture stores no asked counts, so short_requests is absent, not 0;
    # its passes have no drafting histograms: one draft a row, so no acceptance past position 1
    absent = {"goodput_rps", "short_requests", *ACCEPTANCE_METRICS[1:]}
    assert {m for (_, _, _, m) in cells} == set(METRICS) - absent


def test_failed_runs_are_left_out_and_quick_runs_are_preferred_only_when_alone(tmp_path):
    db = tmp_path / "q.duckdb"
    build_fixture(
        db,
        chips=DEFAULT_CHIPS[:1],
        concurrencies=(1, 2),
        quick=True,
        fail={("Fixture M1", "on", 2)},
        passes_per_run=5,
    )
    with Reader(db) as r:
        assert r.quick_choice(EXPERIMENT) is True
        cells = {(c.arm, c.concurrency) for c in r.cells(EXPERIMENT, True)}
        assert ("on", 2) not in cells and ("off", 2) in cells
        assert ("on", 2) in {(a, k) for _, a, k in r.layout(EXPERIMENT, True)}  # still a planned cell
        assert r.quick_choice("no-such-experiment") is None
    build_fixture(db, chips=DEFAULT_CHIPS[:1], concurrencies=(1,), quick=False, passes_per_run=5, add=True)
    with Reader(db) as r:
        assert r.quick_choice(EXPERIMENT) is False


def test_a_remeasurement_supersedes_the_older_run_of_the_same_round(tmp_path):
    db = tmp_path / "r.duckdb"
    build_fixture(db, chips=DEFAULT_CHIPS[:1], concurrencies=(1,), passes_per_run=5)
    with Reader(db) as r:
        before = [c for c in r.cells(EXPERIMENT, False) if c.metric == "decode_tps" and c.arm == "on"]
    remeasure(db, DEFAULT_CHIPS[0], "on", 1, speedup=2.0, day=datetime(2026, 12, 1))
    with Reader(db) as r:
        after = [c for c in r.cells(EXPERIMENT, False) if c.metric == "decode_tps" and c.arm == "on"]
        as_of = [
            c
            for c in r.cells(EXPERIMENT, False, as_of=datetime(2026, 11, 21))
            if c.metric == "decode_tps" and c.arm == "on"
        ]
        assert len(r.remeasured(EXPERIMENT, False, datetime(2026, 11, 21))) == 2
    assert after[0].n_rounds == 2
    assert after[0].mean == pytest.approx(before[0].mean * 2, rel=0.05)
    assert as_of[0].mean == pytest.approx(before[0].mean)


def test_inlined_sql_runs_as_printed(fixture_db):
    sql = inline_sql(CELLS_SQL, {"experiment": EXPERIMENT, "quick": False, "as_of": None, "label": None})
    assert "$" not in sql.replace("'$.blas'", "")
    con = duckdb.connect(str(fixture_db), read_only=True)
    assert len(con.execute(sql.rstrip().rstrip(";")).fetchall()) > 0
    con.close()


def test_missing_database_is_a_readable_error(tmp_path):
    with pytest.raises(QueryError, match="does not exist"):
        Reader(tmp_path / "none.duckdb")
