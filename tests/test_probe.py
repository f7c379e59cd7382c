"""The machine probe: measured for real, stored with every run of a `runner run`, NULL for
old data, and refused when it is not a positive figure."""

from __future__ import annotations

import math

import duckdb
import pytest
from fixture_db import FixtureChip, build_fixture

from runner.experiments.probe import Probe, measure
from runner.store.cell import CellRecord
from runner.store.store import PROBE_COLUMNS, Store, StoreError


def test_the_probe_measures_three_positive_figures():
    p = measure()
    assert all(math.isfinite(v) and v > 0 for v in (p.prefill_gflops, p.decode_gflops, p.read_gbps))
    assert set(p.columns()) == set(PROBE_COLUMNS)


def test_probe_rows_are_stored_and_old_runs_read_null(tmp_path):
    db = tmp_path / "runs.duckdb"
    build_fixture(db, chips=(FixtureChip("Old", 100.0),), rounds=1, concurrencies=(1,))
    with Store.open(db) as st:
        chip_id = st.con.execute("SELECT chip_id FROM chips").fetchall()[0][0]
        run = st.begin_run(
            CellRecord("spec-fixture", "d", "on", 1, 5, 0, False),
            chip_id=chip_id,
            model_sha256="m",
            code_version="c",
            knobs={},
        )
        st.record_probe(run, Probe(10.0, 2.5, 8.0).columns())
        with pytest.raises(StoreError, match="record_probe: probe figures must be positive"):
            st.record_probe(run, {"probe_read_gbps": -1.0})
        with pytest.raises(StoreError, match="unknown probe columns"):
            st.record_probe(run, {"probe_gpu": 1.0})
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT round, probe_prefill_gflops, probe_decode_gflops, probe_read_gbps FROM runs ORDER BY round"
    ).fetchall()
    con.close()
    assert rows[-1] == (5, 10.0, 2.5, 8.0)
    assert all(r[1:] == (None, None, None) for r in rows[:-1])


POST = """\
---
date: 2026-11-20
experiment: spec-fixture
---
# A machine twice as slow

Solo, MTP is {{ claim("+25%", gain("decode_tps", arm="on", concurrency=1)) }} on decode.
"""


def test_a_re_measurement_on_a_machine_twice_as_slow_says_so_in_its_note_table_and_provenance(tmp_path):
    import re
    from datetime import datetime

    from fixture_db import remeasure
    from publish_project import build_site, write_project

    x = FixtureChip("Fixture X", 100.0)
    db = tmp_path / "runs.duckdb"
    build_fixture(db, chips=(x,), day=datetime(2026, 11, 20), passes_per_run=8)
    with Store.open(db) as st:
        st.con.execute(
            "UPDATE runs SET probe_prefill_gflops = 40, probe_decode_gflops = 9, probe_read_gbps = 6"
        )
    later = remeasure(db, x, "on", 1, speedup=0.6, day=datetime(2026, 11, 22))
    with Store.open(db) as st:  # the same fingerprint, half the matmul speed, the same memory
        st.con.execute(
            "UPDATE runs SET probe_prefill_gflops = 20, probe_decode_gflops = 8.5, probe_read_gbps = 6.2 "
            "WHERE list_contains(?, run_id)",
            [later],
        )
    result = build_site(write_project(tmp_path, db, {"p.md": POST}))
    assert result.ok, result.warnings
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    said = "same machine class, prefill-sized products 2.0x slower"
    clauses = re.findall(r'<span class="bothrows-clause" data-clause="machine">(.*?)</span>', html)
    assert clauses == [said]  # a clause of the re-measurement's one-line note
    table = html[html.index('id="claims-on-every-chip"') :]
    # a header's hyphens do not break (a narrow column broke "prefill-sized" across lines)
    header = f"Fixture X (newest) ({said})".replace("-", "\u2011")
    assert f"<th>{header}</th>" in table[: table.index("</table>")]
    lines = re.findall(
        r"<li>Machine probe on Fixture X, instance [0-9a-f]{8} "
        r"\(runs from ([\d-]+), (\d+) runs\): (.*?)</li>",
        html,
    )
    assert [(d, p.split(",")[0]) for d, _, p in lines] == [
        ("2026-11-20", "prefill-sized products 40 GFLOP/s"),
        ("2026-11-22", "prefill-sized products 20 GFLOP/s"),
    ]
