"""`runner run --until-decided` end to end on a random checkpoint: the declared rounds,
then rounds added at the design's looks to the concurrencies whose comparisons are
undecided; a budget that ends first is a normal end, and running again continues the
sequence; every run records its design. Bad flags are refused with one line."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import duckdb
import pytest

from runner.cli import main as cli
from runner.experiments.declaration import load
from runner.experiments.until_decided import Comparison, Judged, deciding_comparisons, look_line, still_open
from runner.publish.stats.verdicts import MOST_ROUNDS
from runner.train.random_init import write_random_checkpoint


def declaration(model: Path) -> str:
    return textwrap.dedent(f"""\
        title = "a/a until decided"
        model = "{model}"
        seed = 5
        rounds = 2
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        requests_per_client = 1
        prompt_tokens = [8, 16]
        max_new_tokens = 6
        min_cell_seconds = 0

        [engine]
        max_batch_size = 2

        [arms.a]
        mtp = false

        [arms.b]
        mtp = false
        """)


@pytest.fixture(scope="module")
def decl(tmp_path_factory):
    root = tmp_path_factory.mktemp("until")
    path = root / "aa.toml"
    path.write_text(declaration(write_random_checkpoint(root / "model", seed=2)))
    return path


def _rounds(db: Path) -> dict[tuple[str, int], int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT arm, concurrency, count(DISTINCT round), "
            "count(*) FILTER (WHERE looks IS DISTINCT FROM '2,4') FROM runs "
            "WHERE status = 'complete' GROUP BY 1, 2"
        ).fetchall()
    finally:
        con.close()
    assert {other for *_, other in rows} == {0}  # every run, an added look's too, records the whole design
    return {(arm, c): n for arm, c, n, _ in rows}


def test_a_spent_budget_ends_normally_and_running_again_continues_the_sequence(decl, tmp_path, capfd):
    db = tmp_path / "runs.duckdb"
    args = ["run", str(decl), "--db", str(db), "--no-openblas", "--until-decided", "--max-rounds", "4"]
    assert cli([*args, "--budget", "0.001s"]) == 0  # spent before the declared rounds end
    first = capfd.readouterr().err
    assert "look 1 of 2 (rounds 2, 4)" in first and "stay undecided" in first
    assert set(_rounds(db).values()) == {2}
    undecided = {
        int(c) for c in re.findall(r"of b vs a at concurrency (\d): .*: undecided", first)
    }  # at two rounds a 97.5% t interval has t = 25: nothing is decided
    assert undecided
    assert re.search(
        r"of b vs a at concurrency \d: .*: undecided \((about|more than) \d+ rounds would decide it", first
    )
    assert cli(args) == 0
    second = capfd.readouterr().err
    assert "look 2 of 2: measuring up to 4 rounds" in second and "look 2 of 2 (rounds 2, 4)" in second
    rounds = _rounds(db)
    assert {c for (_, c), n in rounds.items() if n == 4} == undecided
    assert all(rounds[("a", c)] == rounds[("b", c)] for c in (1, 2))


def test_a_remeasurement_judges_its_own_rounds_and_never_reruns_an_earlier_looks_cells(decl, tmp_path, capfd):
    db = tmp_path / "runs.duckdb"
    args = ["run", str(decl), "--db", str(db), "--no-openblas", "--until-decided", "--max-rounds", "4"]
    assert cli(args) == 0
    capfd.readouterr()
    assert set(_rounds(db).values()) == {4}  # nothing decides at two rounds: every cell got four
    assert cli([*args, "--remeasure"]) == 0
    err = capfd.readouterr().err
    # its first look sees its own two rounds, not the earlier measurement's four
    assert re.findall(r"over (\d+) rounds", err.split("look 2 of 2:")[0]) and set(
        re.findall(r"over (\d+) rounds", err.split("look 2 of 2:")[0])
    ) == {"2"}
    con = duckdb.connect(str(db), read_only=True)
    try:
        per_cell = con.execute(
            "SELECT max(n) FROM (SELECT count(*) n FROM runs WHERE status = 'complete' "
            "GROUP BY arm, concurrency, round)"
        ).fetchone()[0]
    finally:
        con.close()
    assert per_cell == 2  # one run a cell from each measurement: look 2 re-ran none of look 1's


def test_an_edited_declarations_looks_judge_its_own_rounds_not_the_earlier_versions(decl, tmp_path, capfd):
    db = tmp_path / "runs.duckdb"
    flags = ["--db", str(db), "--no-openblas", "--until-decided", "--max-rounds", "4"]
    assert cli(["run", str(decl), *flags]) == 0
    capfd.readouterr()
    assert set(_rounds(db).values()) == {4}
    edited = tmp_path / decl.name  # the same experiment, another declaration: its cells are new
    edited.write_text(decl.read_text().replace("seed = 5", "seed = 6"))
    assert cli(["run", str(edited), *flags, "--budget", "0.001s"]) == 0  # its declared rounds only
    err = capfd.readouterr().err
    assert "look 1 of 2" in err
    # the first look sees the two rounds it measured, not the earlier declaration's four
    assert set(re.findall(r"over (\d+) rounds", err)) == {"2"}


def test_an_aa_copy_is_measured_beside_the_others_but_never_keeps_a_run_going(decl):
    exp = load(decl)
    exp = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, aa=True))
    assert exp.aa_copy == "a-aa"
    aa, b = Comparison("a-aa", "a", "decode_tps", (1,)), Comparison("b", "a", "decode_tps", (1,))
    judged = [Judged(aa, 1, "", "undecided"), Judged(b, 1, "", "faster")]
    assert still_open(judged, exp) == []
    judged.append(Judged(b, 2, "", None))
    assert still_open(judged, exp) == [judged[-1]]
    assert still_open([Judged(aa, 1, "", "undecided")], load(decl)) == [Judged(aa, 1, "", "undecided")]


def test_the_deciding_comparisons_default_to_every_arm_against_the_first_on_two_metrics(decl):
    exp = load(decl)
    assert [(c.arm, c.base, c.metric, c.concurrencies) for c in deciding_comparisons(exp)] == [
        ("b", "a", "decode_tps", (1, 2)),
        ("b", "a", "aggregate_tps", (1, 2)),
    ]
    headline = deciding_comparisons(exp, {"arm": "b", "base": "a", "metric": "prefill_tps"})
    assert [(c.metric, c.concurrencies) for c in headline] == [("prefill_tps", (1, 2))]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--budget", "soon"], "--budget: expected a duration"),
        (["--max-rounds", "1"], "--max-rounds: must be at least"),
    ],
)
def test_bad_flags_are_one_line_and_measure_nothing(decl, tmp_path, capfd, flags, words):
    db = tmp_path / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--no-openblas", "--until-decided", *flags]) == 2
    err = capfd.readouterr().err
    assert words in err and not db.exists()


def test_an_undecided_line_says_about_how_many_rounds_would_decide_it(decl):
    b = Comparison("b", "a", "decode_tps", (1,))
    assert look_line(Judged(b, 1, "+3.0%", "faster"), 12).endswith(": +3.0%: faster")
    assert look_line(Judged(b, 1, "+3.0%", "undecided", 9), 12).endswith(
        ": undecided (about 9 rounds would decide it)"
    )
    assert look_line(Judged(b, 1, "-2.9%", "undecided", 40), 24).endswith(
        ": undecided (about 40 rounds would decide it; max_rounds is 24)"
    )
    assert look_line(Judged(b, 1, "-9.9%", "undecided", MOST_ROUNDS), 24).endswith(
        f"(more than {MOST_ROUNDS} rounds would decide it; max_rounds is 24)"
    )


def test_a_headline_floor_keeps_a_comparison_open_until_the_floor_is_decided(decl):
    exp = load(decl)
    (cmp,) = deciding_comparisons(exp, {"arm": "b", "base": "a", "metric": "decode_tps", "at_least": "0.97x"})
    assert cmp.floor == pytest.approx(-0.03) and cmp.floor_text == "0.97x"
    # level within the band, but the floor at -3% not decided: the run measures on
    level_only = Judged(cmp, 4, "-1.0% [-7.2%, +5.6%]", "level", None, "undecided")
    held = Judged(cmp, 1, "+26% [+7%, +47%]", "faster", None, "holds")
    assert still_open([level_only, held], exp) == [level_only]
    assert look_line(dataclasses.replace(level_only, rounds_to_decide=97), 24).endswith(
        ": -1.0% [-7.2%, +5.6%]: level; at least 0.97x: undecided (about 97 rounds would decide it; "
        "max_rounds is 24)"
    )
    with pytest.raises(ValueError, match="headline at_least: stated value 'most of it'"):
        deciding_comparisons(exp, {"arm": "b", "base": "a", "metric": "decode_tps", "at_least": "most of it"})


def test_a_floor_the_post_cannot_state_is_one_line_naming_the_post_and_measures_nothing(tmp_path, capfd):
    root = tmp_path / "docs"
    (root / "experiments").mkdir(parents=True)
    (root / "blog" / "posts").mkdir(parents=True)
    model = write_random_checkpoint(tmp_path / "model", seed=2)
    decl = root / "experiments" / "floor.toml"
    decl.write_text(declaration(model).replace("rounds = 2\n", "rounds = 2\nmax_rounds = 4\n"))
    post = root / "blog" / "posts" / "floor.md"
    post.write_text(
        "---\ndate: 2026-12-06\nexperiment: floor\n"
        'headline: {arm: b, base: a, metric: decode_tps, at_least: "nearly all"}\n---\n# F\n'
    )
    db = tmp_path / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--no-openblas"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {post}: headline at_least: stated value 'nearly all' is not a number like "
        "'+25%', '1.3x' or '97.4 tok/s'"
    ]
    assert not db.exists()
