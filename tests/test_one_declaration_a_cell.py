"""A cell's rounds come from one declaration: an edited declaration measures something
else, so its rounds supersede the cell's earlier version's as a whole, never pooled with
the rounds it did not re-measure. Cells it did not re-measure keep the earlier rounds."""

from __future__ import annotations

from datetime import datetime

import duckdb
from fixture_db import FixtureChip, build_fixture, remeasure

from runner.publish.sql.home import Cutoff
from runner.publish.sql.reader import Reader

X = FixtureChip("Fixture X", 100.0)
DAY, EDITED_DAY = datetime(2026, 11, 20), datetime(2026, 11, 22)


def _rounds(values: dict, arm: str, concurrency: int) -> dict[int, float]:
    return {
        k.round: v["decode_tps"] for k, v in values.items() if (k.arm, k.concurrency) == (arm, concurrency)
    }


def test_an_edited_declarations_rounds_supersede_a_cells_earlier_rounds_as_a_whole(tmp_path):
    db = tmp_path / "runs.duckdb"
    build_fixture(
        db, chips=(X,), arms=("off", "on"), concurrencies=(1, 2), rounds=3, passes_per_run=8, day=DAY
    )
    # the edited declaration re-measures one cell, in two rounds, twice as fast
    edited = remeasure(db, X, "on", 1, speedup=2.0, day=EDITED_DAY, rounds=2)
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE runs SET declaration_sha256 = 'e' || declaration_sha256[2:] "
            "WHERE list_contains(?, run_id)",
            [edited],
        )
    with Reader(db) as reader:
        newest = reader.run_values("spec-fixture", False)
        earliest = reader.run_values("spec-fixture", False, Cutoff(datetime(2026, 11, 23)))
    solo = _rounds(newest, "on", 1)
    assert sorted(solo) == [0, 1]  # the edited version's two rounds, not its earlier third
    assert sorted(_rounds(newest, "on", 2)) == [0, 1, 2]  # a cell it left keeps its rounds
    assert sorted(_rounds(earliest, "on", 1)) == [0, 1, 2]  # a dated view: the earliest version's
    assert min(solo.values()) > 1.5 * max(_rounds(earliest, "on", 1).values())
