"""Runtime versions on a page: provenance lists them, and a later measurement under another
runtime version gets its own dated note, as another code version does (real mkdocs builds)."""

from __future__ import annotations

import re
from datetime import datetime

import duckdb
from fixture_db import DEFAULT_CHIPS, build_fixture, remeasure
from publish_project import build_site, post_text, write_project


def set_versions(db, run_ids: list[str], runtime: str | None, server: str | None) -> None:
    con = duckdb.connect(str(db))  # test data written directly, on a database the store migrated
    try:
        con.execute(
            "UPDATE runs SET runtime_version = ?, server_version = ? WHERE run_id IN (SELECT unnest(?))",
            [runtime, server, run_ids],
        )
    finally:
        con.close()


def test_another_runtime_version_gets_its_own_note_and_provenance_lists_it(tmp_path):
    db = tmp_path / "v.duckdb"
    build_fixture(db, passes_per_run=10)
    m1 = DEFAULT_CHIPS[0]
    first = remeasure(db, m1, "on", 1, speedup=1.0, day=datetime(2026, 12, 3))
    second = remeasure(db, m1, "on", 1, speedup=1.0, day=datetime(2026, 12, 5), seed=2)
    set_versions(db, first, "mlx-lm 0.32.2", None)
    set_versions(db, second, "mlx-lm 0.33.0", "0.33.0-0.33.1-Linux")
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    result = build_site(config, strict=False)
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text()
    assert "Update 2026-12-03 (automatic)" in html and "Update 2026-12-05 (automatic)" in html
    runtimes = re.findall(r'<span class="bothrows-clause" data-clause="runtime">(.*?)</span>', html)
    assert runtimes == ["mlx-lm 0.32.2", "mlx-lm 0.33.0, server 0.33.0-0.33.1-Linux"]
    prov = html[html.index('class="bothrows-provenance"') :]
    assert "<li>Runtime versions: <code>on: mlx-lm 0.33.0, server 0.33.0-0.33.1-Linux</code></li>" in prov


def test_the_same_runtime_version_makes_one_note(tmp_path):
    db = tmp_path / "v.duckdb"
    build_fixture(db, passes_per_run=10)
    m1 = DEFAULT_CHIPS[0]
    first = remeasure(db, m1, "on", 1, speedup=1.0, day=datetime(2026, 12, 3))
    second = remeasure(db, m1, "on", 1, speedup=1.0, day=datetime(2026, 12, 5), seed=2)
    set_versions(db, first + second, "mlx-lm 0.32.2", None)
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    html = next((build_site(config, strict=False).site / "blog").glob("20*/**/index.html")).read_text()
    assert html.count('data-clause="runtime">mlx-lm 0.32.2<') == 1


def set_code(db, run_ids: list[str], code: str) -> None:
    con = duckdb.connect(str(db))  # test data written directly, on a database the store migrated
    try:
        con.execute("UPDATE runs SET code_version = ? WHERE run_id IN (SELECT unnest(?))", [code, run_ids])
    finally:
        con.close()


def test_notes_of_one_day_follow_the_measurements_not_their_code_hashes(tmp_path):
    """The newest notes show and the rest fold: of two re-measurements on one day, the later
    one's note comes last even when its code version sorts first (it had been folded away
    under the morning's, whose hash sorted after it)."""
    db = tmp_path / "v.duckdb"
    build_fixture(db, passes_per_run=10)
    m1 = DEFAULT_CHIPS[0]
    morning = remeasure(db, m1, "on", 1, speedup=1.0, day=datetime(2026, 12, 5), hour=8)
    evening = remeasure(db, m1, "on", 1, speedup=1.0, day=datetime(2026, 12, 5), hour=18, seed=2)
    set_code(db, morning, "fff0000")
    set_code(db, evening, "0000aaa")
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    html = next((build_site(config, strict=False).site / "blog").glob("20*/**/index.html")).read_text()
    codes = re.findall(r'data-clause="code">code (\w+)<', html)
    assert codes == ["fff0000", "0000aaa"], codes


def test_the_newest_notes_shown_are_the_newest_runs_of_every_experiment_the_post_names(tmp_path):
    """A post naming two experiments, both re-measured three times on one day: the three
    notes shown are the day's last three measurements, whichever experiment each was (the
    notes had been grouped by experiment, so the shown ones were all the last one's)."""
    db = tmp_path / "v.duckdb"
    m1 = DEFAULT_CHIPS[0]
    for exp in ("exp-a", "exp-b"):
        build_fixture(db, experiment=exp, chips=(m1,), passes_per_run=10, add=True)
    for n, (exp, hour) in enumerate(
        [("exp-a", 8), ("exp-b", 9), ("exp-a", 12), ("exp-b", 13), ("exp-a", 18), ("exp-b", 19)]
    ):
        runs = remeasure(
            db, m1, "on", 1, experiment=exp, speedup=1.0, day=datetime(2026, 12, 5), hour=hour, seed=n + 2
        )
        set_code(db, runs, f"c{hour:02d}0000")
    post = post_text(stated="+25%", experiment="exp-a").replace(
        "experiment: exp-a", "experiments: [exp-a, exp-b]"
    )
    config = write_project(tmp_path, db, {"p.md": post})
    html = next((build_site(config, strict=False).site / "blog").glob("20*/**/index.html")).read_text()
    shown = html[html.index("</details>", html.index('class="bothrows-notes"')) :]
    codes = re.findall(r'data-clause="code">code (\w+)<', shown)
    assert codes == ["c130000", "c180000", "c190000"], codes
