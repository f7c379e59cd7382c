"""Committed measurement folders and the database rebuilt from them: real fixture
databases written out through the store, real git repositories merged with `git merge`,
a real quick `runner run` on a random checkpoint, and real mkdocs builds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from fixture_db import EXPERIMENT, FixtureChip, build_fixture
from publish_project import build_site, post_text, write_project

from runner.cli import main as cli
from runner.store import measurements
from runner.store.store import Store, StoreError
from runner.train.random_init import write_random_checkpoint

NAME = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{8}-[\w.-]+-[0-9a-f]{8}$")
ORDER = {
    "chips": "chip_id",
    "runs": "run_id",
    "requests": "run_id, request_id",
    "passes": "run_id, pass_index",
}


def measured(tmp: Path, root: Path, chip: FixtureChip, day: datetime, seed: int) -> list[Path]:
    """A fixture database of one chip, written out as measurement folders into root."""
    db = tmp / f"{chip.name.replace(' ', '-')}-{seed}.duckdb"
    build_fixture(db, chips=(chip,), day=day, seed=seed)
    root.mkdir(parents=True, exist_ok=True)
    with Store.open(db) as st:
        ids = {r[0] for r in st.con.execute("SELECT run_id FROM runs").fetchall()}
        return measurements.write_runs(st, ids, root)


def rows(db: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY {o}").fetchall() for t, o in ORDER.items()}
    finally:
        con.close()


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.org",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.org",
    )
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_folders_are_named_by_start_chip_experiment_and_runs(tmp_path):
    root = tmp_path / "measurements"
    folders = measured(tmp_path, root, FixtureChip("Fixture M1", 100.0), datetime(2026, 11, 19), 0)
    assert len(folders) == 1 and NAME.match(folders[0].name), folders
    assert folders[0].name.startswith("20261119T080000Z-")
    assert folders[0].name.split("-", 2)[2].startswith(EXPERIMENT)
    assert sorted(p.name for p in folders[0].iterdir()) == [
        "chips.parquet",
        "passes.parquet",
        "requests.parquet",
        "runs.parquet",
        "tokens.parquet",
    ]


def test_two_clones_each_adding_a_measurement_merge_without_conflict(tmp_path):
    base = tmp_path / "base"
    data = Path("reports") / "data" / "measurements"
    measured(tmp_path, base / data, FixtureChip("Fixture M1", 100.0), datetime(2026, 11, 19), 0)
    git(base, "init", "-q", "-b", "main")
    git(base, "add", ".")
    git(base, "commit", "-q", "-m", "first measurement")
    for clone, chip, seed in (("a", FixtureChip("Chip A", 120.0), 1), ("b", FixtureChip("Chip B", 90.0), 2)):
        git(tmp_path, "clone", "-q", str(base), clone)
        measured(tmp_path, tmp_path / clone / data, chip, datetime(2026, 11, 25), seed)
        git(tmp_path / clone, "add", ".")
        git(tmp_path / clone, "commit", "-q", "-m", f"measured on {chip.name}")
    a = tmp_path / "a"
    git(a, "fetch", "-q", str(tmp_path / "b"), "main")
    merged = git(a, "merge", "--no-edit", "FETCH_HEAD")
    assert "CONFLICT" not in merged.stdout
    assert len(measurements.measurement_folders(a / data)) == 3
    db = a / "reports" / "data" / "runs.duckdb"
    loaded = measurements.sync_database(db)
    assert loaded.rebuilt and loaded.folders == 3
    con = duckdb.connect(str(db), read_only=True)
    try:
        chips = con.execute(
            "SELECT ch.name, count(*) FROM runs JOIN chips ch USING (chip_id) GROUP BY 1 ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    assert chips == [("Chip A", 12), ("Chip B", 12), ("Fixture M1", 12)]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three measurement folders of two chips, from three separate fixture databases."""
    tmp = tmp_path_factory.mktemp("three")
    root = tmp / "measurements"
    measured(tmp, root, FixtureChip("Fixture M1", 100.0), datetime(2026, 11, 19), 0)
    measured(tmp, root, FixtureChip("Fixture M3", 160.0), datetime(2026, 11, 19), 1)
    measured(tmp, root, FixtureChip("Fixture M1", 100.0), datetime(2026, 11, 24), 2)
    return root


def test_the_database_depends_only_on_the_files_not_on_order_or_history(three, tmp_path):
    folders = measurements.measurement_folders(three)
    files = measurements.manifest(three)
    forward, backward = tmp_path / "forward.duckdb", tmp_path / "backward.duckdb"
    measurements.load_folders(folders, forward, files)
    measurements.load_folders(folders[::-1], backward, files)
    assert rows(forward) == rows(backward)
    # history: a database synced with one folder, then with all three, equals a fresh load
    grown = tmp_path / "grown" / "measurements"
    grown.mkdir(parents=True)
    shutil.copytree(folders[0], grown / folders[0].name)
    db = grown.parent / "runs.duckdb"
    assert measurements.sync_database(db).folders == 1
    for f in folders[1:]:
        shutil.copytree(f, grown / f.name)
    assert measurements.sync_database(db).rebuilt
    assert rows(db) == rows(forward)
    again = measurements.sync_database(db)
    assert not again.rebuilt and "is up to date with the 3 measurement folder(s)" in again.describe()
    # and the pages built from either are the same bytes
    sites = []
    for name, source in (("f", forward), ("b", backward)):
        config = write_project(tmp_path / name, source, {"p.md": post_text()})
        result = build_site(config, site=tmp_path / name / "site")
        assert result.ok, result.warnings
        sites.append(
            {
                p.relative_to(result.site).as_posix(): p.read_bytes()
                for p in sorted(result.site.rglob("*"))
                if p.is_file()
            }
        )
    assert sites[0].keys() == sites[1].keys()
    assert [k for k in sites[0] if sites[0][k] != sites[1][k]] == []


def test_a_corrupt_file_is_one_error_naming_it_and_the_old_database_stays(three, tmp_path):
    root = tmp_path / "measurements"
    shutil.copytree(three, root)
    db = tmp_path / "runs.duckdb"
    measurements.sync_database(db)
    before = rows(db)
    bad = root / "20261201T000000Z-0000000a-broken-00000000"
    shutil.copytree(measurements.measurement_folders(three)[0], bad)
    (bad / "passes.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(StoreError) as e:
        measurements.sync_database(db)
    assert str(e.value).startswith(f"{bad.resolve() / 'passes.parquet'}: not a readable Parquet file")
    assert rows(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measurements", "runs.duckdb"]
    (bad / "passes.parquet").unlink()  # a folder missing a table names the folder and table
    with pytest.raises(
        StoreError,
        match=r"measurement folder 20261201T000000Z-0000000a-broken-00000000 "
        r"lacks its passes table",
    ):
        measurements.sync_database(db)
    assert rows(db) == before


def test_runs_in_no_folder_are_saved_before_a_rebuild_and_deleted_folders_drop_out(three, tmp_path):
    db = tmp_path / "runs.duckdb"  # a database measured before the folders existed
    build_fixture(db, chips=(FixtureChip("Local chip", 80.0),), seed=5)
    root = tmp_path / "measurements"
    shutil.copytree(three, root)
    loaded = measurements.sync_database(db)
    assert len(loaded.rescued) == 1 and loaded.rescued[0].parent == root.resolve()
    assert "saved " + loaded.rescued[0].name in loaded.describe()
    assert len(rows(db)["runs"]) == 4 * 12
    shutil.rmtree(root / measurements.measurement_folders(three)[0].name)
    assert measurements.sync_database(db).rescued == []  # deleting a folder deletes its runs
    assert len(rows(db)["runs"]) == 3 * 12


def test_runner_run_writes_a_folder_of_exactly_the_runs_it_completed(tmp_path, capsys):
    model = write_random_checkpoint(tmp_path / "model", seed=4)
    decl = tmp_path / "smoke.toml"
    decl.write_text(
        textwrap.dedent(f"""\
        title = "smoke"
        model = "{model}"
        seed = 3
        rounds = 1
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        requests_per_client = 1
        prompt_tokens = [8, 12]
        max_new_tokens = 3

        [engine]
        max_batch_size = 2
        prefill_chunk = 16

        [arms.off]
        mtp = false
        """)
    )
    db = tmp_path / "data" / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--quick"]) == 0
    root = tmp_path / "data" / "measurements"
    [folder] = measurements.measurement_folders(root)
    assert NAME.match(folder.name) and "-smoke-" in folder.name
    assert f"wrote 2 run(s) to {folder}" in capsys.readouterr().err
    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = sorted(
            r[0] for r in con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()
        )
    finally:
        con.close()
    assert sorted(measurements.read_folder(folder)["runs"].column("run_id").to_pylist()) == ids
    assert cli(["run", str(decl), "--db", str(db), "--quick"]) == 0  # nothing left to run
    assert measurements.measurement_folders(root) == [folder]
    assert cli(["run", str(decl), "--db", str(db), "--quick", "--plan"]) == 0
    plan = capsys.readouterr().out.strip().splitlines()[-1]
    assert '"todo": []' in plan and '"complete_here": 2' in plan
