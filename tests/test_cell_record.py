"""A killed run loses nothing from the committed record: a real `runner run` child process,
SIGKILLed after k finished cells; the folders alone rebuild exactly those k, and a resumed
run completes the rest without duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from runner.cli import main as cli
from runner.store import measurements
from runner.store.cell_folders import remove_folder, sweep_unfinished
from runner.train.random_init import write_random_checkpoint

REPO = Path(__file__).resolve().parents[1]
KILL_AFTER = 2


def declaration(model: Path) -> str:
    # Each cell lasts at least a second, so the kill lands inside cell KILL_AFTER + 1.
    return textwrap.dedent(f"""\
        title = "killed"
        model = "{model}"
        seed = 5
        rounds = 2
        concurrency = [1]

        [workload]
        prompts = "heldout"
        requests_per_client = 1
        prompt_tokens = [8, 12]
        max_new_tokens = 4
        min_cell_seconds = 1.0

        [engine]
        max_batch_size = 1
        prefill_chunk = 16

        [arms.off]
        mtp = false

        [arms.on]
        mtp = true
        """)


def cells_of(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT arm, concurrency, round FROM runs WHERE status = 'complete' ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()


def test_sigkill_after_k_cells_leaves_exactly_k_in_the_folders_and_resume_adds_the_rest(tmp_path):
    model = write_random_checkpoint(tmp_path / "model", seed=2)
    decl = tmp_path / "killed.toml"
    decl.write_text(declaration(model))
    db = tmp_path / "data" / "runs.duckdb"
    root = tmp_path / "data" / "measurements"
    child = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "run", str(decl), "--db", str(db), "--json", "--no-openblas"],
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    finished = 0
    try:
        for line in child.stderr:
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "cell_finished" and event.get("status") == "complete":
                finished += 1
                if finished == KILL_AFTER:
                    child.send_signal(signal.SIGKILL)
                    break
    finally:
        child.kill()
        child.wait()
    assert finished == KILL_AFTER and child.returncode == -signal.SIGKILL
    folders = measurements.measurement_folders(root)
    assert len(folders) == KILL_AFTER  # one per finished cell, none for the cell in progress
    for folder in folders:  # each a whole, readable folder
        assert pq.read_metadata(folder / "runs.parquet").num_rows == 1
    # A torn write of an earlier killed process: hidden, so never loaded, and swept.
    torn = root / f".{folders[0].name}-x.tmp-999999999"
    torn.mkdir()
    (torn / "runs.parquet").write_bytes(b"PAR1 half a file")
    fresh = tmp_path / "clone" / "runs.duckdb"  # what a teammate's clone gets
    loaded = measurements.sync_database(fresh, root)
    assert loaded.runs == KILL_AFTER
    first = cells_of(fresh)
    assert len(first) == KILL_AFTER
    assert sweep_unfinished(root) == [torn.name] and not torn.exists()

    # `runner fold` makes the cut-off run's cell folders one folder of the same runs
    assert cli(["fold", "killed", "--db", str(db), "--posts", str(tmp_path)]) == 0
    (folded,) = measurements.measurement_folders(root)
    assert pq.read_metadata(folded / "runs.parquet").num_rows == KILL_AFTER
    refolded = tmp_path / "clone3" / "runs.duckdb"
    measurements.sync_database(refolded, root)
    assert cells_of(refolded) == first

    assert cli(["run", str(decl), "--db", str(db), "--no-openblas"]) == 0  # resume
    every = cells_of(db)
    assert len(every) == len(set(every)) == 4 and set(first) <= set(every)
    con = duckdb.connect(str(db), read_only=True)
    try:  # each run carries its invocation's machine probe
        unprobed = con.execute(
            "SELECT count(*) FROM runs WHERE status = 'complete' AND (probe_prefill_gflops IS NULL "
            "OR probe_decode_gflops IS NULL OR probe_read_gbps IS NULL)"
        ).fetchall()
    finally:
        con.close()
    assert unprobed == [(0,)]
    again = tmp_path / "clone2" / "runs.duckdb"
    measurements.sync_database(again, root)
    assert cells_of(again) == every  # the folders hold each cell once
    runs = [
        r
        for f in measurements.measurement_folders(root)
        for r in measurements.read_folder(f)["runs"].to_pylist()
    ]
    assert len(runs) == 4  # the resumed run's cell folders were folded into its one folder
    assert len(measurements.measurement_folders(root)) == 2


def test_a_run_the_database_holds_and_no_folder_does_is_rescued_on_the_next_load(tmp_path):
    model = write_random_checkpoint(tmp_path / "model", seed=2)
    decl = tmp_path / "killed.toml"
    decl.write_text(declaration(model).replace("rounds = 2", "rounds = 1").replace("= 1.0", "= 0"))
    db = tmp_path / "data" / "runs.duckdb"
    root = tmp_path / "data" / "measurements"
    assert cli(["run", str(decl), "--db", str(db), "--no-openblas"]) == 0
    [folder] = measurements.measurement_folders(root)
    measurements.sync_database(db)
    # A kill between a cell's commit and its folder: the database has the runs, no folder does.
    remove_folder(folder)
    conn = duckdb.connect(str(db))
    conn.execute("DELETE FROM measurement_files")  # the manifest of an empty folder set
    conn.execute("DELETE FROM measurement_runs")
    conn.close()
    loaded = measurements.sync_database(db)
    assert len(loaded.rescued) == 1 and len(cells_of(db)) == 2
