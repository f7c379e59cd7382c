"""Accepted length and acceptance by position (issue 23), on real measurements.

- The shipped `tiny` drafting k = 3 with the chained MTP layer: its pass events through
  the runner's cell rows, the store, a measurement folder and a fresh load keep each
  pass's histograms, and the page metrics equal a direct computation from the events.
- `runner run` of an experiment with that arm: the stored histograms agree with each
  pass's summed columns, and a page with the new values, claims, tables and chart builds
  strictly.
- Old data (no histograms: schema 6 and earlier) reads as k = 1, from the database and
  from a measurement folder without the columns.
"""

from __future__ import annotations

import re
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from fixture_db import EXPERIMENT as FIXTURE_EXPERIMENT
from publish_project import build_site, dedent, write_project

from runner.cli import main as cli
from runner.engine import Engine, PassEvent
from runner.experiments.cell import CellRows
from runner.publish.metrics import ACCEPTANCE_METRICS
from runner.publish.sql.reader import Reader
from runner.store.cell import CellRecord
from runner.store.measurements import load_folders, manifest, write_measurement
from runner.store.store import Store

K = 3
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23, 24], [40, 41], [60, 61, 62, 63]]
CHIP = {
    "name": "test chip",
    "device": "cpu",
    "cores": 2,
    "memory_bytes": 1 << 30,
    "os": "test",
    "mlx_version": "0",
}


def passes_of(db: Path, run_id: str | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT run_id, pass_index, width, drafted, accepted, accepted_lengths, draft_lengths "
            "FROM passes "
            "WHERE $run IS NULL OR run_id = $run ORDER BY run_id, pass_index",
            {"run": run_id},
        ).fetchall()
    finally:
        con.close()


def direct(histograms: list[tuple[tuple, tuple]]) -> dict[str, float | None]:
    """Accepted length and acceptance by position from row-passes spelled out one by one
    (every drafting row carried K drafts: the test checks it)."""
    kept = [m for hist, _ in histograms for m, rows in enumerate(hist) for _ in range(rows)]
    out = {"accepted_length": 1 + sum(kept) / len(kept)}
    for i, name in enumerate(ACCEPTANCE_METRICS, 1):
        out[name] = sum(m >= i for m in kept) / len(kept) if i <= K else None
    return out


@pytest.fixture(scope="module")
def events() -> list[PassEvent]:
    out: list = []
    eng = Engine.from_pretrained(
        "tiny", max_batch_size=4, prefill_chunk=64, mtp=True, draft_tokens=K, compile=False, seed=0
    )
    eng.sink = out.append
    eng.generate(PROMPTS, max_new_tokens=24, temperature=0.0)
    return [e for e in out if isinstance(e, PassEvent)]


def test_a_pass_event_holds_its_drafting_rows_histograms(events):
    drafting = [e for e in events if e.drafted]
    assert len(drafting) >= 5 and any(e.drafted == 0 and e.accepted_lengths == () for e in events)
    for e in drafting:
        rows = sum(e.accepted_lengths)
        assert e.draft_lengths == (0,) * K + (rows,)  # the chain drafts K for every drafting row
        assert e.drafted == K * rows and 0 < rows <= e.width
        assert sum(m * n for m, n in enumerate(e.accepted_lengths)) == e.accepted
    kept = [m for e in drafting for m, n in enumerate(e.accepted_lengths) if n]
    assert {0, K} <= set(kept)  # rejections and whole blocks both occur: the test can tell


def test_histograms_go_through_store_folder_and_load_and_read_as_metrics(events, tmp_path):
    """PassEvent -> the runner's cell rows -> DuckDB -> a measurement folder -> a fresh load."""
    rows = CellRows().close(events[0].start_ns, events)
    first = tmp_path / "first.duckdb"
    with Store.open(first) as st:
        chip = st.ensure_chip(CHIP)
        run = st.begin_run(
            CellRecord("accept", "d" * 64, "chain", 1, 0, seed=0, quick=False),
            chip_id=chip,
            model_sha256="m" * 64,
            code_version="test",
            knobs={"draft_tokens": K},
        )
        st.append_passes(run, rows.passes)
        st.finish_run(run, "complete")
        folder = write_measurement(st, [run], tmp_path / "measurements")
    loaded = tmp_path / "loaded.duckdb"
    load_folders([folder], loaded, manifest(tmp_path / "measurements"))
    stored = passes_of(loaded)
    assert [(r[1], r[5], r[6]) for r in stored] == [
        (e.pass_index, list(e.accepted_lengths), list(e.draft_lengths)) for e in events
    ]
    with Reader(loaded) as reader:
        (values,) = reader.run_values("accept", False).values()
    expected = direct([(e.accepted_lengths, e.draft_lengths) for e in events if e.drafted])
    for name, want in expected.items():
        assert values[name] == (None if want is None else pytest.approx(want, rel=1e-12)), name
    assert values["acceptance"] == pytest.approx(
        sum(e.accepted for e in events) / sum(e.drafted for e in events), rel=1e-12
    )


DECLARATION = textwrap.dedent("""\
    title = "acceptance by position"
    model = "tiny"
    seed = 5
    rounds = 2
    concurrency = [1, 2]

    [workload]
    prompts = "heldout"
    requests_per_client = 1
    prompt_tokens = [16, 32]
    max_new_tokens = 24
    min_cell_seconds = 0

    [engine]
    max_batch_size = 2
    prefill_chunk = 64

    [arms.off]
    mtp = false

    [arms.chain]
    mtp = true
    draft_policy = "always"
    draft_tokens = 3
    """)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("accept")
    decl = root / "accept.toml"
    decl.write_text(DECLARATION)
    db = root / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db)]) == 0
    return db


def test_runner_stores_histograms_that_agree_with_each_pass(measured):
    con = duckdb.connect(str(measured), read_only=True)
    # pages key a run by its chip's machine class (publish/sql/classes.py)
    runs = con.execute(
        "SELECT run_id, class_id, arm, concurrency, round FROM runs JOIN chips USING (chip_id)"
    ).fetchall()
    key_of = {r[0]: tuple(r[1:]) for r in runs}
    con.close()
    stored = passes_of(measured)
    assert all(r[3] == 0 and r[5] == [] and r[6] == [] for r in stored if key_of[r[0]][1] == "off")
    chain = [r for r in stored if key_of[r[0]][1] == "chain" and r[3]]
    assert chain
    for _, _, width, drafted, accepted, kept, carried in chain:
        rows = sum(kept)
        assert carried == [0] * K + [rows] and drafted == K * rows and rows <= width
        assert sum(m * n for m, n in enumerate(kept)) == accepted
    with Reader(measured) as reader:
        values = reader.run_values("accept", False)
    assert len(values) == 8
    for key, v in values.items():
        if key.arm == "off":
            assert v["accepted_length"] is None and v["acceptance_at_1"] is None  # never drafted
            continue
        want = direct([(r[5], r[6]) for r in chain if key_of[r[0]] == tuple(key)])
        assert {m: v[m] for m in want} == {
            m: (None if w is None else pytest.approx(w, rel=1e-12)) for m, w in want.items()
        }


PAGE = dedent("""\
    ---
    date: {day}
    experiment: accept
    ---
    # Drafting three tokens a row

    Alone, a drafting row commits {{{{ claim("{tau}",
        metric("accepted_length", arm="chain", concurrency=1)) }}}} tokens a pass, and its
    first draft holds {{{{ claim("{first}", metric(acceptance_at(1), arm="chain", concurrency=1)) }}}}
    of the time.

    {{{{ regime_table(["decode_tps", "accepted_length", acceptance_at(1), acceptance_at(2),
        acceptance_at(3)], base="off") }}}}

    {{{{ headline_table("chain", base="off", metrics=["decode_tps", "accepted_length"]) }}}}

    {{{{ acceptance_by_position_chart() }}}}
    """)


def test_a_page_with_the_new_metrics_and_chart_builds_strictly(measured, tmp_path):
    with Reader(measured) as reader:
        values = reader.run_values("accept", False)
    chain = [v for k, v in values.items() if k.arm == "chain" and k.concurrency == 1]
    tau = sum(v["accepted_length"] for v in chain) / len(chain)
    first = sum(v["acceptance_at_1"] for v in chain) / len(chain)
    day = datetime.now(timezone.utc).date().isoformat()
    page = PAGE.format(day=day, tau=f"{tau:.2f}", first=f"{first:.0%}")
    config = write_project(tmp_path, measured, {"p.md": page})
    built = build_site(config)
    assert built.ok, built.warnings
    html = next(built.site.glob("blog/20*/**/index.html")).read_text()
    assert "accepted length" in html and "acceptance at 3" in html
    chart = re.search(r'"x":\[1\.0,2\.0,3\.0\]', html)
    assert chart, "the chart draws positions 1 to 3"
    traces = re.findall(r'"name":"([^"]*)","showlegend"', html)
    assert "chain" in traces and "off" not in traces  # an arm that never drafted has no line


def test_a_bad_position_or_concurrency_is_one_clear_failure(measured, tmp_path):
    page = dedent("""\
        ---
        date: 2026-12-01
        experiment: accept
        ---
        # Wrong

        {{ acceptance_by_position_chart(concurrency=3) }}

        {{ metric(acceptance_at(17), arm="chain", concurrency=1) }}
        """)
    built = build_site(write_project(tmp_path, measured, {"p.md": page}))
    assert not built.ok
    text = "\n".join(built.warnings)
    assert "acceptance_by_position_chart: concurrency 3 is not one of [1, 2]" in text
    assert "acceptance_at(): a draft position is a whole number 1 to 16, got 17" in text


def test_old_passes_read_as_one_draft_a_row(fixture_db):
    """The fixture's passes carry no histograms (as before schema 7): k = 1."""
    with Reader(fixture_db) as reader:
        values = reader.run_values(FIXTURE_EXPERIMENT, False)
    on = [v for k, v in values.items() if k.arm == "on" and v["acceptance"] is not None]
    assert on
    for v in on:
        assert v["acceptance_at_1"] == pytest.approx(v["acceptance"], rel=1e-12)
        assert v["accepted_length"] == pytest.approx(1 + v["acceptance"], rel=1e-12)
        assert all(v[m] is None for m in ACCEPTANCE_METRICS[1:])


def test_an_old_folder_without_the_columns_loads_as_k_1(events, tmp_path):
    """A folder written before schema 7 lacks the columns: they load NULL and read as k = 1."""
    rows = CellRows().close(events[0].start_ns, events)
    with Store.open(tmp_path / "new.duckdb") as st:
        run = st.begin_run(
            CellRecord("old", "d" * 64, "on", 1, 0, seed=0, quick=False),
            chip_id=st.ensure_chip(CHIP),
            model_sha256="m" * 64,
            code_version="test",
            knobs={},
        )
        # one draft a drafting row, as before schema 7: drafted counts the drafting rows
        st.append_passes(
            run,
            [
                {**p, "drafted": sum(p["accepted_lengths"]), "accepted": min(p["accepted"], 1)}
                for p in rows.passes
            ],
        )
        st.finish_run(run, "complete")
        folder = write_measurement(st, [run], tmp_path / "measurements")
    table = pq.read_table(folder / "passes.parquet").drop_columns(["accepted_lengths", "draft_lengths"])
    pq.write_table(table, folder / "passes.parquet")
    loaded = tmp_path / "loaded.duckdb"
    load_folders([folder], loaded, manifest(tmp_path / "measurements"))
    assert {(r[5], r[6]) for r in passes_of(loaded)} == {(None, None)}
    with Reader(loaded) as reader:
        (v,) = reader.run_values("old", False).values()
    drafted, accepted = sum(table.column("drafted").to_pylist()), sum(table.column("accepted").to_pylist())
    assert v["acceptance_at_1"] == pytest.approx(accepted / drafted, rel=1e-12)
    assert v["accepted_length"] == pytest.approx(1 + accepted / drafted, rel=1e-12)
    assert v["acceptance_at_2"] is None
