"""Re-measured anywhere: a post judged on its home data while later chips and code
versions show up in its tables, notes and claims-on-every-chip table."""

import re
from datetime import datetime
from html import unescape
from types import SimpleNamespace

import pytest
from fixture_db import FixtureChip, build_fixture, remeasure
from publish_project import build_site, write_project

from runner.publish.site.commands import main_audit
from runner.publish.site.post import render_post

M1, M3 = FixtureChip("Fixture M1", 100.0), FixtureChip("Fixture M3", 160.0)
# One machine type measured with two BLAS libraries: two computed machine classes, one label.
SAME_A = FixtureChip("Same EPYC", 90.0, "openblas", declared=False)
SAME_B = FixtureChip("Same EPYC", 95.0, "reference", declared=False)
SAME = "Same EPYC, 10 cores, GPU"
POST = """\
---
date: 2026-11-20
experiment: spec-fixture
---
# Home and away

Solo, MTP is {{ claim("+25%", gain("decode_tps", arm="on", concurrency=1)) }} on decode,
and {{ claim("+6%", gain("decode_tps", arm="on", concurrency=2)) }} at two sequences.

{{ regime_table(["decode_tps"]) }}

{{ chart("decode_tps") }}
"""


@pytest.fixture(scope="module")
def travelled(tmp_path_factory):
    """Home M1 before the post; later M3, two 'Same EPYC' fingerprints (one without the
    concurrency-2 cell of 'on') and M1 re-measured by another code version."""
    db = tmp_path_factory.mktemp("home") / "runs.duckdb"
    build_fixture(db, chips=(M1,), day=datetime(2026, 11, 19), passes_per_run=8)
    build_fixture(db, chips=(M3,), day=datetime(2026, 11, 25), passes_per_run=8, seed=3, add=True)
    build_fixture(
        db,
        chips=(SAME_A,),
        day=datetime(2026, 11, 26),
        passes_per_run=8,
        seed=4,
        skip={("Same EPYC", "on", 2)},
        code_version="ccc0000",
        add=True,
    )
    build_fixture(
        db,
        chips=(SAME_B,),
        day=datetime(2026, 11, 26),
        passes_per_run=8,
        seed=5,
        code_version="ccc0000",
        add=True,
    )
    for c in (1, 2):
        remeasure(db, M1, "on", c, speedup=1.2, day=datetime(2026, 12, 3))
    return db


def _labels(html: str) -> set[str]:
    return set(re.findall(r'data-chip="([^"]+)"', html))


def test_strict_build_shows_every_chip_notes_and_claims_on_every_chip(travelled, tmp_path):
    config = write_project(tmp_path, travelled, {"p.md": POST})
    result = build_site(config)
    assert result.ok, result.warnings
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    labels = _labels(html)
    assert {"Fixture M1", "Fixture M3"} <= labels
    same = sorted(label for label in labels if label.startswith(SAME + " ("))
    assert len(same) == 2
    notes = [
        (day, unescape(re.sub(r"<[^>]+>", "", text)))
        for day, text in re.findall(r"Update (\d{4}-\d\d-\d\d) \(automatic\)</strong>: (.*?)</p>", html)
    ]
    assert [d for d, _ in notes] == ["2026-11-25", "2026-11-26", "2026-11-26", "2026-12-03"]
    assert notes[0][1].startswith("Fixture M3 · code abc1234 · spec-fixture, 6 cells")
    assert all(" · code ccc0000 · " in t for _, t in notes[1:3])
    assert notes[3][1] == (
        "Fixture M1 · code def5678 · spec-fixture, 2 cells · 0 of 2 claims that read these cells hold there"
    )
    earlier = html[html.index('<details class="bothrows-earlier">') :]
    assert earlier.index("and 1 earlier update") < earlier.index("2026-11-25") < earlier.index("</details>")
    table = html[html.index('id="claims-on-every-chip"') :]
    table = table[: table.index("</table>")]
    heads = re.findall(r"<th>([^<]+)</th>", table)
    assert heads[3:] == ["Fixture M1 (newest)", "Fixture M3", *same]
    rows = {
        n: re.findall(r'data-verdict="([^"]+)"', row)
        for n, row in re.findall(r'<tr data-claim="(\d+)">(.*?)</tr>', table)
    }
    assert rows["1"] == ["does not hold", "holds", "holds", "holds"]
    without = _label_of(same, travelled, SAME_A)  # has no 'on' cell at concurrency 2
    assert rows["2"][0] == "does not hold"
    assert [v == "not measured" for v in rows["2"][2:]] == [label == without for label in same]
    audit = html[html.index("Claims are judged on this post's home data") :]
    assert audit.startswith("Claims are judged on this post's home data: Fixture M1, data as of 2026-11-20.")


def _label_of(labels, db, chip):
    from runner.store.machine_class import of_fingerprint

    return next(label for label in labels if of_fingerprint(chip.fingerprint()).class_id[:8] in label)


def test_audit_prints_every_chip_and_judges_another_chip_on_request(travelled, tmp_path, capsys):
    config = write_project(tmp_path, travelled, {"p.md": POST})
    args = SimpleNamespace(config_file=str(config), database=None, chip=None)
    assert main_audit(args) == 0
    out = capsys.readouterr().out
    assert "home: Fixture M1, data as of 2026-11-20" in out
    assert re.search(r"on Fixture M1 \(newest\): \+4\d\.\d%  \[.*\]  does not hold", out), out
    assert main_audit(SimpleNamespace(config_file=str(config), database=None, chip="Fixture M3")) == 1
    out = capsys.readouterr().out
    assert "judged on 'Fixture M3''s newest data" in out
    assert re.search(r"p\.md:7 +'\+25%' .* ok ", out) and re.search(r"p\.md:8 +'\+6%' .* FAIL ", out), out
    assert main_audit(SimpleNamespace(config_file=str(config), database=None, chip="Fixture M9")) == 1
    assert "--chip 'Fixture M9' names 0 chips" in capsys.readouterr().out


def test_ambiguous_or_unknown_home_is_one_clear_error(travelled):
    meta = {"experiment": "spec-fixture", "date": "2026-12-10"}
    post = render_post(POST.split("---\n", 2)[2], meta, key="blog/posts/p.md", db_path=travelled)
    homes = [f.message for f in post.failures if "home chip" in f.message]
    assert len(homes) == 1 and len(post.failures) == 1, [f.message for f in post.failures]
    assert f"its data as of 2026-12-10 holds chips 'Fixture M1', 'Fixture M3', '{SAME} (" in homes[0]
    post = render_post(
        POST.split("---\n", 2)[2], {**meta, "chip": "Same EPYC"}, key="p.md", db_path=travelled
    )
    assert [f.message for f in post.failures] == [
        "front matter field 'chip': 'Same EPYC' names 2 chips; name one of 'Fixture M1', 'Fixture M3', "
        + ", ".join(repr(x) for x in sorted(_labels("".join(post.blocks.values())))[2:])
    ]
    m3 = render_post(POST.split("---\n", 2)[2], {**meta, "chip": "Fixture M3"}, key="p.md", db_path=travelled)
    assert [v.ok for v in m3.verdicts] == [True, False]  # judged on M3: its +4.8% is not +6%
    assert "on Fixture M3 (data as of 2026-12-10)" in m3.verdicts[1].measured.what


def test_arms_not_named_off_take_the_first_declared_arm_as_base(tmp_path):
    db = tmp_path / "chunk.duckdb"
    build_fixture(
        db,
        experiment="chunk-probe",
        chips=(M1,),
        arms=("large", "small"),
        concurrencies=(1, 4),
        factors={"small": 1.0, "large": 1.3},
        passes_per_run=6,
    )
    decl = tmp_path / "docs" / "experiments"
    decl.mkdir(parents=True)
    (decl / "chunk-probe.toml").write_text(
        "[arms.small]\nprefill_chunk = 16\n[arms.large]\nprefill_chunk = 128\n"
    )
    post = (
        "---\ndate: 2026-11-20\nexperiment: chunk-probe\n---\n# Chunks\n\n"
        '{{ claim("+31%", gain("decode_tps", arm="large", concurrency=1)) }}\n\n'
        '{{ regime_table(["decode_tps"]) }}\n\n{{ traffic({1: 0.5, 4: 0.5}) }}\n'
    )
    result = build_site(write_project(tmp_path, db, {"p.md": post}))
    assert result.ok, result.warnings
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    assert "against arm <code>small</code>" in html and "vs <code>small</code>" in html
    rendered = render_post(
        "# C\n\n{{ regime_table(['decode_tps'], base='large') }}\n",
        {"experiment": "chunk-probe"},
        key="c.md",
        db_path=db,
    )
    assert rendered.failures == [] and "arm <code>large</code>" in "".join(rendered.blocks.values())


def test_a_post_draws_on_several_experiments(tmp_path):
    db = tmp_path / "two.duckdb"
    build_fixture(db, experiment="exp-a", chips=(M1,), passes_per_run=6)
    build_fixture(
        db,
        experiment="exp-b",
        chips=(M1,),
        arms=("x", "y"),
        factors={"x": 1.0, "y": 2.0},
        passes_per_run=6,
        add=True,
    )
    post = (
        "---\ndate: 2026-11-20\nexperiments: [exp-a, exp-b]\n---\n# Two\n\n"
        '{{ claim("+25%", gain("decode_tps", arm="on", base="off", concurrency=1)) }}\n'
        '{{ claim("2.0x", ratio("decode_tps", arm="y", base="x", concurrency=4, experiment="exp-b")) }}\n\n'
        '{{ regime_table(["decode_tps"]) }}\n\n{{ regime_table(["decode_tps"], experiment="exp-b") }}\n'
        '{{ metric("decode_tps", arm="y", concurrency=1, experiment="exp-c") }}\n'
    )
    out = render_post(
        post.split("---\n", 2)[2],
        {"experiments": ["exp-a", "exp-b"], "date": "2026-11-20"},
        key="blog/posts/two.md",
        db_path=db,
    )
    assert [f.message for f in out.failures] == [
        "unknown experiment 'exp-c'; this post draws on 'exp-a', 'exp-b'"
    ]
    assert [v.ok for v in out.verdicts] == [True, True]
    assert sorted(n for n in out.downloads.tables) == [
        f"{e}-{t}" for e in ("exp-a", "exp-b") for t in ("passes", "requests", "runs", "tokens")
    ]
    gaps = render_post("# G\n", {"experiments": ["exp-a", "nothing"]}, key="g.md", db_path=db)
    assert [f.message for f in gaps.failures] == [
        f"experiment 'nothing' has no complete runs in database {db}"
    ]


def test_a_dated_update_judges_its_claims_on_the_data_of_its_own_day(travelled):
    """A section written later (a dated update) reads the data as of its day: as_of=."""
    body = (
        '# U\n\n{{ claim("+25%", gain("decode_tps", arm="on", concurrency=1)) }}\n'
        '{{ claim("+49%", gain("decode_tps", arm="on", concurrency=1, as_of="2026-12-03")) }}\n'
        '{{ claim("+25%", gain("decode_tps", arm="on", concurrency=1, chip="Fixture M3",'
        ' as_of="2026-11-25")) }}\n'
        '{{ metric("decode_tps", arm="on", concurrency=1, as_of="soon") }}\n'
    )
    post = render_post(
        body, {"experiment": "spec-fixture", "date": "2026-11-20"}, key="p.md", db_path=travelled
    )
    assert [v.ok for v in post.verdicts] == [True, True, True], [v.reason for v in post.verdicts]
    assert "Fixture M1 (data as of 2026-12-03)" in post.verdicts[1].measured.what
    assert "Fixture M3 (data as of 2026-11-25)" in post.verdicts[2].measured.what
    assert [f.message for f in post.failures] == ["as_of= names a day (YYYY-MM-DD), got 'soon'"]
