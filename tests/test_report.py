"""`python -m runner.report`: every experiment a post names is measured where no chip has
its current declaration complete (only the cells this chip lacks), used as it is
otherwise, re-measured on --measure 1 (narrowed by --experiment), and the whole site is
built strictly, the same bytes every time, dated by the data. A real random checkpoint,
tiny two-arm declarations, real measurement folders, DuckDB files and mkdocs builds."""

import contextlib
import dataclasses
import gzip
import io
import os
import random
import re
import shutil
import struct
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest
from fixture_db import FixtureChip, _run_rows
from publish_project import post_text, write_project

from runner.cli import main as cli
from runner.experiments.declaration import load, parse
from runner.experiments.execute import plan_cells
from runner.publish.site.commands import _source_date_epoch
from runner.report import build
from runner.report import main as report
from runner.report_inputs import named_experiments
from runner.store import measurements
from runner.store.cell import CellRecord
from runner.store.store import Store
from runner.train.random_init import write_random_checkpoint

DECLARATION = """\
title = "{name}"
model = "{model}"
seed = 5
rounds = 1
concurrency = [1, 2]

[workload]
prompts = "heldout"
requests_per_client = 1
prompt_tokens = [8, 16]
max_new_tokens = 4

[engine]
max_batch_size = 2
prefill_chunk = 16

[arms.off]
mtp = false

[arms.on]
mtp = true
"""
BODY = """
# {title}

{{{{ regime_table(["decode_tps", "aggregate_tps"]) }}}}
"""
POSTS = {
    "alpha.md": "---\ndate: 2026-11-29\nexperiment: alpha\n---\n" + BODY.format(title="Alpha"),
    "beta.md": "---\ndate: 2026-11-29\nexperiments: [beta]\n---\n" + BODY.format(title="Beta"),
    "plain.md": "---\ndate: 2026-11-29\n---\n# No data here\n",
}


@contextlib.contextmanager
def no_source_date_epoch():
    """Unset SOURCE_DATE_EPOCH, and restore it afterwards (the report sets it)."""
    saved = os.environ.pop("SOURCE_DATE_EPOCH", None)
    try:
        yield
    finally:
        os.environ.pop("SOURCE_DATE_EPOCH", None)
        if saved is not None:
            os.environ["SOURCE_DATE_EPOCH"] = saved


def run_report(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), no_source_date_epoch():
        rc = report(list(args))
    return rc, out.getvalue(), err.getvalue()


def runs(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT experiment, arm, concurrency, round, status, finished_at FROM runs "
            "ORDER BY started_at, run_id"
        ).fetchall()
    finally:
        con.close()


def gzip_mtime(data: bytes) -> int:
    return struct.unpack("<I", data[4:8])[0]


def tree(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


def declare(folder: Path, name: str, model: Path) -> Path:
    """A tiny declaration; no per-cell time minimum where the declaration format has one."""
    exp = parse(DECLARATION.format(name=name, model=model).encode(), source=f"{name}.toml", name=name)
    fields = {f.name for f in dataclasses.fields(exp.workload)}
    fast = {k: v for k, v in (("min_cell_seconds", 0.0), ("min_cell_tokens", 0)) if k in fields}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, **fast)).to_toml())
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Two posts on experiments alpha and beta; alpha measured beforehand by `runner run`,
    beta never: the first report measures beta only."""
    root = tmp_path_factory.mktemp("report")
    model = write_random_checkpoint(root / "model", seed=3)
    config = write_project(root, root / "data" / "runs.duckdb", POSTS)
    decls = {n: declare(root / "docs" / "experiments", n, model) for n in ("alpha", "beta")}
    assert cli(["run", str(decls["alpha"]), "--db", str(root / "data" / "runs.duckdb")]) == 0
    first = run_report("--config-file", str(config), "--site-dir", str(root / "site1"))
    return root, config, root / "data" / "runs.duckdb", first


def test_it_measures_only_what_no_chip_has_then_builds_every_post(project):
    root, _, db, (rc, out, err) = project
    assert rc == 0, err
    assert re.search(
        r"^report: alpha: using the data from .*, 4 runs in .* \(complete on .*\); "
        r"pass MEASURE=1 to re-measure$",
        out,
        re.M,
    ), out
    assert re.search(
        r"^report: this chip: .* \(chip [0-9a-f]{8}, \w+, \d+ cores, BLAS .*\), "
        r"an instance of '.+, \d+ cores'$",
        out,
        re.M,
    ), out
    assert re.search(
        r"^report: beta: measuring 4 of 4 cells \(by arm: off 2, on 2\): no chip has a "
        r"complete non-quick set of runs of its current declaration",
        out,
        re.M,
    ), out
    assert re.search(r"^report: estimated measuring time: about \d+", out, re.M), out
    assert out.index("this chip:") < out.index("measured in")
    assert sorted((e, a, c, s) for e, a, c, _, s, _ in runs(db)) == sorted(
        (e, a, c, "complete") for e in ("alpha", "beta") for a in ("off", "on") for c in (1, 2)
    )
    folders = measurements.measurement_folders(root / "data" / "measurements")
    assert [f.name.split("-")[2] for f in folders] == ["alpha", "beta"]
    for slug in ("alpha", "beta"):
        html = next(
            p
            for p in (root / "site1" / "blog").glob("20*/**/index.html")
            if f'<h1 id="{slug}"' in p.read_text()
        ).read_text()
        assert html.count('class="bothrows-regime-row') == 4, slug


def test_a_second_report_builds_the_same_site_without_measuring(project):
    root, config, db, _ = project
    before = runs(db)
    rc, out, err = run_report("--config-file", str(config), "--site-dir", str(root / "site2"))
    assert rc == 0, err
    assert "measuring" not in out and "this chip" not in out
    assert "report: beta: using the data from" in out
    assert runs(db) == before
    first, second = tree(root / "site1"), tree(root / "site2")
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []
    newest = max(r[5] for r in before)
    day = newest.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=timezone.utc)
    assert gzip_mtime(first["sitemap.xml.gz"]) == int(day.timestamp())


def test_measure_1_narrowed_to_one_experiment_remeasures_only_it(project):
    root, config, db, _ = project
    before = runs(db)
    rc, out, err = run_report(
        "--config-file",
        str(config),
        "--site-dir",
        str(root / "site3"),
        "--experiment",
        "beta",
        "--measure",
        "1",
    )
    assert rc == 0, err
    assert "report: beta: re-measuring 4 of 4 cells (by arm: off 2, on 2): MEASURE=1 asked" in out
    assert "alpha" not in out
    after = runs(db)
    assert [r for r in after if r[0] == "alpha"] == [r for r in before if r[0] == "alpha"]
    assert len([r for r in after if r[0] == "beta"]) == 8
    assert len(measurements.measurement_folders(root / "data" / "measurements")) == 3


def test_a_fresh_clone_with_data_from_another_chip_builds_without_measuring(project, tmp_path):
    root, _, _, _ = project
    config = write_project(tmp_path, tmp_path / "data" / "runs.duckdb", {"alpha.md": POSTS["alpha.md"]})
    shutil.copytree(root / "docs" / "experiments", tmp_path / "docs" / "experiments")
    exp = load(tmp_path / "docs" / "experiments" / "alpha.toml")
    committed = tmp_path / "elsewhere.duckdb"  # measured on another machine, then committed
    with Store.open(committed) as st:
        rng, chip = random.Random(0), FixtureChip("Fixture M1", 100.0)
        chip_id = st.ensure_chip(chip.fingerprint(), chip.machine_class())
        for cell in plan_cells(exp):
            reqs, passes = _run_rows(rng, chip, cell.arm, cell.concurrency, 1, 10)
            run = st.begin_run(
                CellRecord(
                    experiment="alpha",
                    declaration_sha256=exp.sha256,
                    arm=cell.arm,
                    concurrency=cell.concurrency,
                    round=cell.round,
                    seed=5,
                    quick=False,
                ),
                chip_id=chip_id,
                model_sha256="m" * 64,
                code_version="abc",
                knobs={},
                started_at=datetime(2026, 11, 28, 8),
            )
            st.append_requests(run, reqs)
            st.append_passes(run, passes)
            st.finish_run(run, "complete", finished_at=datetime(2026, 11, 28, 9))
        ids = {r[0] for r in st.con.execute("SELECT run_id FROM runs").fetchall()}
        (tmp_path / "data" / "measurements").mkdir(parents=True)
        measurements.write_runs(st, ids, tmp_path / "data" / "measurements")
    rc, out, err = run_report("--config-file", str(config))
    assert rc == 0, err
    assert "report: alpha: using the data from 2026-11-28 09:00 UTC, 4 runs" in out
    assert "(complete on Fixture M1)" in out and "measuring" not in out
    assert re.search(r"^report: loaded 1 measurement folder\(s\) \(4 runs\)", out, re.M), out


def test_a_post_naming_an_undeclared_experiment_is_one_clear_error(project, tmp_path):
    root, config, _, _ = project
    posts = {**POSTS, "gamma.md": "---\ndate: 2026-11-30\nexperiments: [alpha, gamma]\n---\n# G\n"}
    bad = write_project(tmp_path, root / "data" / "runs.duckdb", posts)
    shutil.copytree(root / "docs" / "experiments", tmp_path / "docs" / "experiments")
    rc, out, err = run_report("--config-file", str(bad))
    assert rc == 2 and out == "" and "Traceback" not in err
    post, decl = (
        tmp_path / "docs" / "blog" / "posts" / "gamma.md",
        tmp_path / "docs" / "experiments" / "gamma.toml",
    )
    assert err == (
        "report: error: the posts' experiments cannot be measured:\n"
        f"  {post}: front matter field 'experiments': experiment 'gamma' has no "
        f"declaration ({decl} does not exist)\n"
    )
    rc, _, err = run_report("--config-file", str(config), "--experiment", "delta")
    assert (rc, err) == (
        2,
        "report: error: EXPERIMENT=delta: no post names this experiment (posts name: alpha, beta)\n",
    )


def test_posts_name_experiments_in_either_field(tmp_path):
    posts = tmp_path / "blog" / "posts"
    posts.mkdir(parents=True)
    (posts / "one.md").write_text("---\nexperiment: a\n---\n# One\n")
    (posts / "two.md").write_text("---\nexperiments: [b, a]\n---\n# Two\n")
    (posts / "three.md").write_text("---\ndate: 2026-11-29\n---\n# Three\n")
    assert named_experiments(tmp_path) == {
        "a": [(posts / "one.md", "experiment"), (posts / "two.md", "experiments")],
        "b": [(posts / "two.md", "experiments")],
    }


def test_the_build_date_comes_from_the_data_not_the_clock(fixture_db, tmp_path):
    finished = datetime(2026, 11, 19, 9, tzinfo=timezone.utc)  # the fixture's finish time
    with no_source_date_epoch():
        _source_date_epoch(fixture_db)  # the one `runner build` uses
        assert os.environ["SOURCE_DATE_EPOCH"] == str(int(finished.timestamp()))
    config = write_project(tmp_path, fixture_db, {"p.md": post_text()})
    config.write_text(config.read_text() + "site_url: https://example.org/\n")  # for <lastmod>
    before = os.environ.get("SOURCE_DATE_EPOCH")
    with no_source_date_epoch():
        assert build(config, tmp_path / "site") == 0
        assert os.environ["SOURCE_DATE_EPOCH"] == str(int(finished.timestamp()))
    assert os.environ.get("SOURCE_DATE_EPOCH") == before
    sitemap = (tmp_path / "site" / "sitemap.xml").read_text()
    assert set(re.findall(r"<lastmod>([^<]+)</lastmod>", sitemap)) == {"2026-11-19"}
    gz = (tmp_path / "site" / "sitemap.xml.gz").read_bytes()
    assert gzip_mtime(gz) == int(datetime(2026, 11, 19, tzinfo=timezone.utc).timestamp())
    assert gzip.decompress(gz).decode() == sitemap


def test_a_missing_config_is_one_readable_error_with_exit_code_2(tmp_path):
    rc, _, err = run_report("--config-file", str(tmp_path / "none.yml"))
    assert (rc, err) == (2, f"report: error: {tmp_path / 'none.yml'}: no such mkdocs config file\n")
