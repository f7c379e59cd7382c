"""A post is judged on the data its author saw: the head-of-line case, a post dated D whose
data was measured on chip X on D and then re-measured on X on D with other values."""

import re
import shutil
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixture_db import FixtureChip, build_fixture, complete_runs, remeasure
from publish_project import build_site, write_project

from runner.publish.site.pin import main_pin
from runner.store import measurements
from runner.store.store import Store

X = FixtureChip("Fixture X", 100.0)
DAY = datetime(2026, 11, 20)
POST = """\
---
date: 2026-11-20
experiment: spec-fixture
{pin}---
# Judged on what its author saw

Solo, MTP is {{{{ claim("+25%", gain("decode_tps", arm="on", concurrency=1)) }}}} on decode.

{{{{ regime_table(["decode_tps"]) }}}}
"""


@pytest.fixture(scope="module")
def same_day(tmp_path_factory):
    """Folders: X measured at 08:00 on D, then its `on` solo cell re-measured at 15:00 on
    D, 1.6x faster (a different claim value). Returns (database, first folder, second)."""
    work = tmp_path_factory.mktemp("sameday")
    db = work / "build" / "runs.duckdb"
    root = work / "measurements"
    root.mkdir()
    build_fixture(db, chips=(X,), day=DAY, passes_per_run=8)
    before = complete_runs(db)
    with Store.open(db) as st:
        [first] = measurements.write_runs(st, before, root)
    remeasure(db, X, "on", 1, speedup=1.6, day=DAY, hour=15)
    after = complete_runs(db)
    with Store.open(db) as st:
        [second] = measurements.write_runs(st, after - before, root)
    return work, first.name, second.name


def _site(work, tmp_path, pin: str):
    data = tmp_path / "data"
    shutil.copytree(work / "measurements", data / "measurements")
    config = write_project(tmp_path, data / "runs.duckdb", {"p.md": POST.format(pin=pin)})
    return config, build_site(config)


def _checks(result):
    assert result.ok, result.warnings
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    lines = [
        re.sub(r"<[^>]+>", "", x) for x in re.findall(r'<p class="bothrows-update[^"]*"[^>]*>(.*?)</p>', html)
    ]
    notes = [x for x in lines if "(automatic)" in x]
    assert len(notes) == 1 and notes[0].startswith("Update 2026-11-20 (automatic)")  # the same day's
    assert "0 of 1 claims that read these cells hold there" in notes[0]  # re-measurement, as a note
    table = html[html.index('id="claims-on-every-chip"') :]
    table = table[: table.index("</table>")]
    assert re.findall(r"<th>([^<]+)</th>", table)[3:] == ["Fixture X (newest)"]
    assert "does not hold" in table  # on the newest data, beside the home verdict that holds


def test_unpinned_post_is_judged_on_the_earliest_measurement_of_its_day(same_day, tmp_path):
    work, _, _ = same_day
    _checks(_site(work, tmp_path, "")[1])


def test_pinned_post_is_judged_on_its_folders_and_runner_pin_writes_them(same_day, tmp_path, capsys):
    work, first, second = same_day
    config, result = _site(work, tmp_path, f"data: [{first}]\n")
    _checks(result)
    post = config.parent / "docs" / "blog" / "posts" / "p.md"
    post.write_text(POST.format(pin=""))
    args = SimpleNamespace(post=post, config_file=str(config), database=None)
    assert main_pin(args) == 0
    assert f"data:\n  - {first}\n---" in post.read_text()
    assert "data pinned to 1 measurement folder(s)" in capsys.readouterr().out


def test_a_pin_on_the_second_measurement_judges_there_and_a_bad_pin_names_the_field(same_day, tmp_path):
    work, _, second = same_day
    result = _site(work, tmp_path / "a", f"data: [{second}]\n")[1]
    assert not result.ok  # the pinned folder holds only the re-measured cell: its claim cannot be read
    bad = _site(work, tmp_path / "b", "data: [no-such-folder]\n")[1]
    assert not bad.ok
    assert any(
        "'data' names measurement folders the data does not hold: no-such-folder" in w for w in bad.warnings
    )


def test_an_update_section_reads_the_earliest_data_of_its_day_or_its_data_pin(same_day, tmp_path):
    work, first, second = same_day
    on_day = 'as_of="2026-11-20"'
    body = (
        f'{{{{ claim("+25%", gain("decode_tps", arm="on", concurrency=1, {on_day})) }}}}\n\n'
        f'{{{{ claim("1", metric("decode_tps", arm="on", concurrency=1, {on_day}, data=["{first}"])) }}}}\n\n'
        f'{{{{ claim("1", metric("decode_tps", arm="on", concurrency=1, {on_day}, data="{second}")) }}}}\n\n'
    )
    text = POST.format(pin="").replace("{{ regime_table", body + "{{ regime_table")
    data = tmp_path / "data"
    shutil.copytree(work / "measurements", data / "measurements")
    result = build_site(write_project(tmp_path, data / "runs.duckdb", {"p.md": text}))
    failed = [w for w in result.warnings if "stated '1', measured" in w]
    assert len(failed) == 2 and not any("stated '+25%'" in w for w in result.warnings), result.warnings
    seen, later = (float(re.search(r"measured ([\d,.]+)", w).group(1).replace(",", "")) for w in failed)
    assert later / seen == pytest.approx(1.6, rel=0.1)  # each pin reads its own folder


def test_a_pin_names_the_home_chip_when_another_chip_measured_the_same_day(same_day, tmp_path):
    work, first, _ = same_day
    other = tmp_path / "other" / "runs.duckdb"  # another machine, the same day, before the post's end
    build_fixture(other, chips=(FixtureChip("Fixture Y", 70.0),), day=DAY.replace(hour=12), passes_per_run=8)
    data = tmp_path / "data"
    shutil.copytree(work / "measurements", data / "measurements")
    with Store.open(other) as st:
        measurements.write_runs(st, _complete_of(st), data / "measurements")
    unpinned = build_site(write_project(tmp_path / "u", data / "runs.duckdb", {"p.md": POST.format(pin="")}))
    assert not unpinned.ok and any("home chip is ambiguous" in w for w in unpinned.warnings)
    pinned = build_site(
        write_project(tmp_path / "p", data / "runs.duckdb", {"p.md": POST.format(pin=f"data: [{first}]\n")})
    )
    assert pinned.ok, pinned.warnings


def _complete_of(st) -> set[str]:
    return {r[0] for r in st.con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()}


def test_another_chip_measured_on_the_posts_own_day_is_a_note(tmp_path):
    # The post is pinned to chip X's folder; chip Y measures the same experiment later the
    # same day. Y's runs are neither judged nor after the post's date, and must still show.
    y = FixtureChip("Fixture Y", 50.0)
    db = tmp_path / "build" / "runs.duckdb"
    root = tmp_path / "data" / "measurements"
    root.mkdir(parents=True)
    build_fixture(db, chips=(X,), day=DAY, passes_per_run=8)
    before = complete_runs(db)
    with Store.open(db) as st:
        [first] = measurements.write_runs(st, before, root)
    remeasure(db, y, "on", 1, speedup=1.0, day=DAY, hour=15)
    remeasure(db, y, "off", 1, speedup=1.0, day=DAY, hour=16)
    later = complete_runs(db) - before
    with Store.open(db) as st:
        measurements.write_runs(st, later, root)
    config = write_project(
        tmp_path, tmp_path / "data" / "runs.duckdb", {"p.md": POST.format(pin=f"data: [{first.name}]\n")}
    )
    result = build_site(config, strict=False)
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    lines = [
        re.sub(r"<[^>]+>", "", x) for x in re.findall(r'<p class="bothrows-update[^"]*"[^>]*>(.*?)</p>', html)
    ]
    assert [x for x in lines if "Fixture Y" in x and "(automatic)" in x], lines


def test_a_post_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, capsys):
    config = Path(__file__).resolve().parents[1] / "mkdocs.yml"
    for post, why in ((tmp_path / "missing.md", "No such file or directory"), (tmp_path, "Is a directory")):
        assert main_pin(SimpleNamespace(post=post, config_file=str(config), database=None)) == 2
        assert capsys.readouterr().err.strip() == f"runner pin: {post}: cannot read the post ({why})"
