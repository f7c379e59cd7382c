"""`python -m runner.report`: measures when the database lacks the experiment, uses the
data as it is otherwise, re-measures (`runner run --remeasure`) on --measure 1, and
builds the same bytes every time, dated by the data. A real random checkpoint, the
flagship declaration shrunk to 8 small cells, real DuckDB files and real mkdocs builds."""
import contextlib
import dataclasses
import gzip
import io
import os
import re
import struct
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from conftest_publish import *  # noqa: F401,F403  (fixtures)
from conftest_publish import post_text, write_project
from runner.cli import main as cli
from runner.experiments.declaration import parse
from runner.publish.queries import Reader
from runner.report import build, main as report, source_date_epoch
from runner.train.random_init import write_random_checkpoint

REPO = Path(__file__).resolve().parents[1]
NAME = "spec-decode-batching"
ARMS = tuple(re.findall(r"(?m)^\[arms\.([\w-]+)\]", (REPO / "reports" / "experiments" / f"{NAME}.toml").read_text()))
POST = f"""\
---
date: 2026-11-29
experiment: {NAME}
---
# Flagship, shrunk

{{{{ regime_table(["decode_tps", "aggregate_tps", "drafted_passes", "state_mb"]) }}}}

{{{{ traffic({{1: 0.7, 4: 0.3}}, label="mostly solo") }}}}

{{{{ drafted_by_width_chart() }}}}
"""


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
        return con.execute("SELECT arm, concurrency, round, status, finished_at FROM runs "
                           "ORDER BY started_at").fetchall()
    finally:
        con.close()


def gzip_mtime(data: bytes) -> int:
    return struct.unpack("<I", data[4:8])[0]


def tree(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The flagship declaration on a random checkpoint: its arms x concurrency 1 and 4, one
    round, one short request per client; measured once by the first report."""
    root = tmp_path_factory.mktemp("report")
    model = write_random_checkpoint(root / "model", seed=3)
    text = (REPO / "reports" / "experiments" / f"{NAME}.toml").read_text()
    text = re.sub(r'(?m)^model = .*$', f'model = "{model}"', text)  # the shipped one may be absent
    exp = parse(text.encode(), source=f"{NAME}.toml", name=NAME)
    small = dataclasses.replace(exp, rounds=1, concurrency=(1, 4),
                                workload=dataclasses.replace(
                                    exp.workload, requests_per_client=1, max_new_tokens=6,
                                    prompt_tokens=(12, 24), shared_prefix_tokens=8))
    (root / "decl").mkdir()
    decl = root / "decl" / f"{NAME}.toml"
    decl.write_text(small.to_toml())
    config = write_project(root, root / "runs.duckdb", {"flagship.md": POST})
    first = run_report("--experiment", str(decl), "--config-file", str(config),
                       "--site-dir", str(root / "site1"))
    return root, decl, config, first


def test_without_data_it_measures_then_builds(project):
    root, _, _, (rc, out, err) = project
    assert rc == 0, err
    assert f"report: measuring {NAME}: " in out and "has no complete non-quick set" in out
    assert sorted((a, c, s) for a, c, _, s, _ in runs(root / "runs.duckdb")) == sorted(
        (a, c, "complete") for a in ARMS for c in (1, 4))
    html = next((root / "site1" / "blog").glob("20*/**/index.html")).read_text()
    assert html.count('class="bothrows-regime-row') == 2 * len(ARMS)
    assert "for this traffic choose <strong>" in html


def test_with_data_it_builds_the_same_site_without_measuring(project):
    root, decl, config, _ = project
    before = runs(root / "runs.duckdb")
    assert cli(["run", str(decl), "--db", str(root / "runs.duckdb")]) == 0  # resumes: nothing to do
    rc, out, err = run_report("--experiment", str(decl), "--config-file", str(config),
                              "--site-dir", str(root / "site2"))
    assert rc == 0, err
    newest = max(r[4] for r in before)
    assert f"report: using committed data from {newest:%Y-%m-%d %H:%M} UTC, {2 * len(ARMS)} runs of {NAME}" in out
    assert "pass MEASURE=1 to re-measure" in out
    assert runs(root / "runs.duckdb") == before
    first, second = tree(root / "site1"), tree(root / "site2")
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []
    day = newest.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=timezone.utc)
    assert gzip_mtime(first["sitemap.xml.gz"]) == int(day.timestamp())


def test_measure_1_remeasures_every_cell_and_pages_use_the_new_runs(project):
    root, decl, config, _ = project
    before = runs(root / "runs.duckdb")
    rc, out, err = run_report("--experiment", str(decl), "--measure", "1", "--config-file",
                              str(config), "--site-dir", str(root / "site3"))
    assert rc == 0, err
    assert "re-measuring every cell" in out
    after = runs(root / "runs.duckdb")
    assert after[:len(before)] == before and len(after) == 2 * len(before)
    assert all(s == "complete" for *_, s, _ in after)
    with Reader(root / "runs.duckdb") as r:  # the newest run per cell and round, never both
        assert {c.n_rounds for c in r.cells(NAME, False)} == {1}


def test_the_build_date_comes_from_the_data_not_the_clock(fixture_db, tmp_path):
    finished = datetime(2026, 11, 19, 9, tzinfo=timezone.utc)  # the fixture's finish time
    assert source_date_epoch(fixture_db) == int(finished.timestamp())
    config = write_project(tmp_path, fixture_db, {"p.md": post_text()})
    config.write_text(config.read_text() + "site_url: https://example.org/\n")  # for <lastmod>
    before = os.environ.get("SOURCE_DATE_EPOCH")
    with no_source_date_epoch():
        assert build(config, tmp_path / "site", fixture_db) == 0
        assert os.environ["SOURCE_DATE_EPOCH"] == str(int(finished.timestamp()))
    assert os.environ.get("SOURCE_DATE_EPOCH") == before
    sitemap = (tmp_path / "site" / "sitemap.xml").read_text()
    assert set(re.findall(r"<lastmod>([^<]+)</lastmod>", sitemap)) == {"2026-11-19"}
    gz = (tmp_path / "site" / "sitemap.xml.gz").read_bytes()
    assert gzip_mtime(gz) == int(datetime(2026, 11, 19, tzinfo=timezone.utc).timestamp())
    assert gzip.decompress(gz).decode() == sitemap


def test_bad_input_is_one_readable_error_with_exit_code_2(project, tmp_path):
    _, decl, config, _ = project
    rc, out, err = run_report("--experiment", "no-such-experiment", "--config-file", str(config))
    assert rc == 2
    assert err.startswith("report: error: reports/experiments/no-such-experiment.toml is not a "
                          "valid experiment declaration:")
    assert "Traceback" not in err
    rc, _, err = run_report("--experiment", str(decl), "--config-file", str(tmp_path / "none.yml"))
    assert (rc, err) == (2, f"report: error: {tmp_path / 'none.yml'}: no such mkdocs config file\n")
