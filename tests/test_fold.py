"""`runner fold`: a cut-off run's one-cell measurement folders become one folder holding the
same runs, while pinned folders, other experiments and other code versions stay apart."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
from store_rows import add_run, counts

from runner.cli import main as cli
from runner.experiments.commands import _note_cut_off
from runner.experiments.progress import Progress
from runner.store import measurements
from runner.store.measurements import write_measurement
from runner.store.store import Store


def run_ids(folder: Path) -> list[str]:
    return sorted(pq.read_table(folder / "runs.parquet", columns=["run_id"]).column("run_id").to_pylist())


def cut_off_record(tmp_path: Path) -> tuple[Path, dict[str, list[Path]]]:
    """A record as a cut-off run leaves it: four one-cell folders of `exp`, one of them
    pinned by a post; one of `exp` at another code version; one of `other`; a finished
    run's folder of two cells, and a cell folder of one of them left beside it. Returns
    the database and the folders by kind."""
    db = tmp_path / "data" / "runs.duckdb"
    root = measurements.folder_of(db)
    root.mkdir(parents=True)
    kinds: dict[str, list[Path]] = {"cells": [], "old_code": [], "other": [], "whole": []}
    with Store.open(db) as st:
        for r in range(4):
            kinds["cells"].append(write_measurement(st, [add_run(st, round=r)], root))
        older = add_run(st, round=4)
        st.con.execute("UPDATE runs SET code_version = 'older' WHERE run_id = ?", [older])
        kinds["old_code"].append(write_measurement(st, [older], root))
        kinds["other"].append(write_measurement(st, [add_run(st, experiment="other")], root))
        whole = [add_run(st, round=r, arm="b") for r in range(2)]
        kinds["whole"].append(write_measurement(st, whole, root))
        # a cell folder of a run the whole run's folder holds too (a kill caught its removal)
        kinds["leftover"] = [write_measurement(st, whole[:1], root)]
    posts = tmp_path / "posts"
    posts.mkdir()
    (posts / "post.md").write_text(f"---\nexperiment: exp\ndata:\n  - {kinds['cells'][0].name}\n---\nText.\n")
    return db, kinds


def test_fold_writes_one_folder_of_the_cells_and_a_fresh_load_reads_the_same_runs(tmp_path, capsys):
    db, kinds = cut_off_record(tmp_path)
    root = measurements.folder_of(db)
    before = measurements.measurement_folders(root)
    measurements.sync_database(tmp_path / "before.duckdb", root)
    posts = tmp_path / "posts"
    cell_runs = sorted(r for f in kinds["cells"][1:] for r in run_ids(f))

    assert cli(["fold", "exp", "--db", str(db), "--posts", str(posts), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "would fold 3 cell folders of exp" in dry
    assert f"would remove {kinds['leftover'][0].name}: its run is already in {kinds['whole'][0].name}" in dry
    assert measurements.measurement_folders(root) == before  # a dry run changes nothing

    assert cli(["fold", "exp", "--db", str(db), "--posts", str(posts)]) == 0
    out = capsys.readouterr().out
    assert f"kept {kinds['cells'][0].name}" in out and "folded 3 cell folders of exp" in out
    after = measurements.measurement_folders(root)
    new = [f for f in after if f not in before]
    assert len(new) == 1 and len(after) == len(before) - 3 + 1 - 1
    assert f"removed {kinds['leftover'][0].name}" in out and not kinds["leftover"][0].exists()
    assert run_ids(new[0]) == cell_runs
    for kept in (kinds["cells"][0], *kinds["old_code"], *kinds["other"], *kinds["whole"]):
        assert kept.is_dir()  # pinned, another code version, another experiment, a whole run
    for gone in kinds["cells"][1:]:  # the cells folded
        assert not gone.exists()

    # The same rows load from the folders as before, each run once.
    with Store.open(tmp_path / "before.duckdb") as st:
        want = counts(st)
    measurements.sync_database(tmp_path / "after.duckdb", root)
    with Store.open(tmp_path / "after.duckdb") as st:
        assert counts(st) == want

    assert cli(["fold", "exp", "--db", str(db), "--posts", str(posts)]) == 0  # nothing left to fold
    assert "nothing to fold" in capsys.readouterr().out
    assert measurements.measurement_folders(root) == after


def test_fold_of_a_locked_database_or_an_unknown_experiment_is_one_line_and_changes_nothing(tmp_path, capsys):
    db, _ = cut_off_record(tmp_path)
    root = measurements.folder_of(db)
    measurements.sync_database(db)
    before = measurements.measurement_folders(root)
    posts = str(tmp_path / "posts")
    with Store.open(db):  # a run in progress holds the write lock
        assert cli(["fold", "exp", "--db", str(db), "--posts", posts]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "locked" in err and len(err.strip().splitlines()) == 1
    assert measurements.measurement_folders(root) == before

    assert cli(["fold", "nosuch", "--db", str(db), "--posts", posts]) == 2
    assert "holds experiment 'nosuch'" in capsys.readouterr().err
    assert cli(["fold", "--db", str(tmp_path / "elsewhere.duckdb"), "--posts", posts]) == 2
    assert "no measurement folders" in capsys.readouterr().err
    assert measurements.measurement_folders(root) == before


def test_a_run_starting_names_the_cell_folders_an_earlier_cut_off_run_left(tmp_path):
    db, _ = cut_off_record(tmp_path)
    with Store.open(db) as st:
        chip = st.con.execute("SELECT DISTINCT chip_id FROM runs").fetchall()[0][0]
    said = io.StringIO()
    _note_cut_off("exp", measurements.folder_of(db), Progress(said, mode="plain"))
    # the pinned folder is one of the four: a run does not read posts, so it counts it
    assert said.getvalue().splitlines() == [
        f"4 cell folders of exp (chip {chip[:8]}, code abc) from a run that was cut off: "
        "`runner fold exp` folds them into one"
    ]
    quiet = io.StringIO()
    _note_cut_off("other", measurements.folder_of(db), Progress(quiet, mode="plain"))
    assert quiet.getvalue() == ""  # a single one-cell folder is a one-cell run, not a cut-off one
