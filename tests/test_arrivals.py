"""Open-loop arrivals end to end: `runner run` on a real random checkpoint, the real engine
and a real DuckDB file, for a seeded Poisson process and a script; per-token rows stored
with every request. Nothing here asserts how long anything took: arrival times are the
schedule's (exact), and waiting is checked by order (a request that found c in flight
produces no token before one of those finished)."""

from __future__ import annotations

import dataclasses
import itertools
import textwrap
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from runner.cli import main as cli
from runner.experiments.declaration import load
from runner.experiments.estimate import cell_seconds
from runner.experiments.progress import CellTarget
from runner.experiments.workloads.arrivals import Poisson, Script, describe, min_requests, poisson_gaps
from runner.experiments.workloads.workload import PromptStream

SEED, RATE = 13, 200.0  # faster than one row serves: arrivals queue at concurrency 1
ENGINE = """
    [engine]
    max_batch_size = 3
    compile = false

    [arms.wide]
    prefill_chunk = 64

    [arms.narrow]
    prefill_chunk = 16
    """
SCRIPT = """
    [[workload.script]]
    at = 0.0
    prompt_tokens = 12
    label = "short"

    [[workload.script]]
    at = 0.0
    prompt_tokens = 14
    lane = 1
    label = "short"

    [[workload.script]]
    at = 0.0
    prompt_tokens = 10
    max_new_tokens = 3
    lane = 2

    [[workload.script]]
    at = 0.0
    prompt_tokens = 9
    lane = 2

    [[workload.script]]
    at = 0.25
    prompt_tokens = 160
    max_new_tokens = 4
    label = "long"
    lane = 1
    """
SCRIPT_NEW_TOKENS = 6
# concurrency 1 sends lane 0 alone; 3 (the ceiling) sends every entry: 5 of them, 4 at t = 0
PLAY = {1: [0], 3: [0, 1, 2, 3, 4]}
PLAY_TOKENS = 3 * SCRIPT_NEW_TOKENS + 3 + 4  # one play's new tokens at the ceiling
MIN_TOKENS = PLAY_TOKENS + 1  # so the ceiling plays it twice


def declaration(model: Path, workload: str, extra: str = "") -> str:
    return (
        textwrap.dedent(f"""\
        title = "open loop"
        model = "{model}"
        seed = {SEED}
        rounds = 1
        concurrency = [1, 3]

        [workload]
        prompts = "heldout"
        """)
        + textwrap.dedent(workload)
        + textwrap.dedent(ENGINE)
        + textwrap.dedent(extra)
    )


def measure(tmp: Path, name: str, text: str) -> dict:
    decl = tmp / f"{name}.toml"
    decl.write_text(text)
    db = tmp / f"{name}.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--json"]) == 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        cells = defaultdict(list)
        for arm, c, *row in con.execute(
            "SELECT r.arm, r.concurrency, q.request_id, q.client, q.label, q.prompt_tokens, "
            "q.output_tokens, q.arrival_ns, q.first_token_ns, q.done_ns FROM runs r "
            "JOIN requests q USING (run_id) ORDER BY q.request_id"
        ).fetchall():
            cells[(arm, c)].append(
                dict(zip(("id", "client", "label", "prompt", "out", "arrival", "first", "done"), row))
            )
        tokens = con.execute(
            "SELECT q.output_tokens, count(k.t_ns), min(k.token_index), max(k.token_index), "
            "bool_and(k.t_ns IS NOT NULL), q.first_token_ns, q.done_ns, "
            "arg_min(k.t_ns, k.token_index), arg_max(k.t_ns, k.token_index) "
            "FROM requests q LEFT JOIN tokens k USING (run_id, request_id) "
            "GROUP BY q.run_id, q.request_id, q.output_tokens, q.first_token_ns, q.done_ns"
        ).fetchall()
        slo = con.execute("SELECT DISTINCT slo_ttft_ms, slo_tpot_ms FROM runs").fetchall()
    finally:
        con.close()
    return {"decl": decl, "cells": cells, "tokens": tokens, "slo": slo}


@pytest.fixture(scope="module")
def poisson(tmp_path_factory, tiny_checkpoint):
    return measure(
        tmp_path_factory.mktemp("poisson"),
        "poisson",
        declaration(
            tiny_checkpoint,
            f"""\
        prompt_tokens = [8, 24]
        max_new_tokens = 5
        requests_per_client = 4
        min_cell_seconds = 0
        arrivals = {{ process = "poisson", rate = {RATE} }}

        [workload.slo]
        ttft_ms = 250.0
        """,
        ),
    )


@pytest.fixture(scope="module")
def scripted(tmp_path_factory, tiny_checkpoint):
    return measure(
        tmp_path_factory.mktemp("script"),
        "script",
        declaration(
            tiny_checkpoint,
            f"""\
        arrivals = "script"
        max_new_tokens = {SCRIPT_NEW_TOKENS}
        min_cell_seconds = 0
        min_cell_tokens = {MIN_TOKENS}
        """,
            SCRIPT,
        ),
    )


def in_flight_at_most(rows: list[dict], c: int) -> None:
    """No request's first token before all but c - 1 of the requests submitted ahead of it
    (in id order, arrival order here) had finished."""
    for i, r in enumerate(rows):
        ahead = sorted(q["done"] for q in rows[:i])
        if len(ahead) >= c:
            assert r["first"] >= ahead[len(ahead) - c], (r, c)


def test_poisson_arrivals_are_the_seeded_process_and_the_same_in_every_arm(poisson):
    cells = poisson["cells"]
    assert sorted(cells) == [(a, c) for a in ("narrow", "wide") for c in (1, 3)]
    for (arm, c), rows in cells.items():
        n = len(rows)
        assert n == 4 * c  # requests_per_client x concurrency
        assert [r["id"] for r in rows] == list(range(n)) and {r["client"] for r in rows} == {0}
        expected = [0] + list(itertools.accumulate(itertools.islice(poisson_gaps(SEED, RATE), n - 1)))
        assert [r["arrival"] for r in rows] == expected  # exactly the schedule, waits or not
        assert all(r["label"] is None and r["first"] >= r["arrival"] for r in rows)
        in_flight_at_most(rows, c)
    for c in (1, 3):  # the same request ids name the same requests in both arms
        assert [(r["id"], r["prompt"], r["arrival"]) for r in cells[("wide", c)]] == [
            (r["id"], r["prompt"], r["arrival"]) for r in cells[("narrow", c)]
        ]
    assert poisson["slo"] == [(250.0, None)]


def test_the_script_plays_its_lanes_and_replays_until_the_minimums_hold(scripted):
    for (arm, c), rows in scripted["cells"].items():
        plays = rows[-1]["id"] // 5 + 1
        assert [r["id"] for r in rows] == [p * 5 + j for p in range(plays) for j in PLAY[c]]
        # played again while its finished requests held fewer than min_cell_tokens
        per_play = [sum(r["out"] for r in rows if r["id"] // 5 == p) for p in range(plays)]
        assert sum(per_play[:-1]) < MIN_TOKENS <= sum(per_play)
        for p in range(plays):
            play = [r for r in rows if r["id"] // 5 == p]
            start = 0 if p == 0 else max(r["done"] for r in rows if r["id"] // 5 == p - 1)
            for r in play:
                j = r["id"] % 5
                assert r["arrival"] == start + (250_000_000 if j == 4 else 0)
                assert r["label"] == {0: "short", 1: "short", 4: "long"}.get(j)
                assert r["client"] == [0, 1, 2, 2, 1][j] and r["prompt"] == [12, 14, 10, 9, 160][j]
            if c == 3:  # four arrive at once into three slots: entry 3 waits for a finish
                first3 = [r for r in play if r["id"] % 5 < 3]
                waited = next(r for r in play if r["id"] % 5 == 3)
                assert waited["first"] >= min(r["done"] for r in first3)
                assert waited["arrival"] == start
    for c in (1, 3):
        key = lambda r: (r["id"], r["label"], r["prompt"], r["client"])  # noqa: E731
        assert sorted(map(key, scripted["cells"][("wide", c)])) == sorted(
            map(key, scripted["cells"][("narrow", c)])
        )
    assert scripted["slo"] == [(None, None)]


@pytest.mark.parametrize("which", ["poisson", "scripted"])
def test_every_request_has_one_token_row_per_output_token(which, poisson, scripted):
    rows = {"poisson": poisson, "scripted": scripted}[which]["tokens"]
    assert rows
    for out, n, low, high, all_set, first, done, t_first, t_last in rows:
        assert (n, low, high, all_set) == (out, 0, out - 1, True)
        assert (t_first, t_last) == (first, done)


def test_script_replays_take_the_next_prompts_of_the_stream(tiny_checkpoint, tmp_path):
    decl = tmp_path / "s.toml"
    decl.write_text(
        declaration(
            tiny_checkpoint,
            f"""\
        arrivals = "script"
        max_new_tokens = {SCRIPT_NEW_TOKENS}
        """,
            SCRIPT,
        )
    )
    w = load(decl).workload
    stream = PromptStream(w, SEED, tiny_checkpoint, width=3)
    first = Script(w, SEED, 3, stream).due(0, 0)
    assert [a.request_id for a in first] == [0, 1, 2, 3]  # entry 4 comes at 0.25 s
    again = Script(w, SEED, 3, PromptStream(w, SEED, tiny_checkpoint, width=3)).due(0, 0)
    assert [a.prompt for a in again] == [a.prompt for a in first]  # the same in every arm
    later = stream.prompt_of(5, 12)
    assert len(later) == 12 and later != first[0].prompt  # play 1's entry 0: new text
    assert min_requests(w, 1) == 1 and min_requests(w, 3) == 5
    exp = load(decl)  # the estimate: whole plays, up to min_cell_seconds (2.5 s by default)
    assert all(cell_seconds(exp, c) >= 2.5 for c in (1, 3))
    once = dataclasses.replace(exp, workload=dataclasses.replace(w, min_cell_seconds=0.0))
    assert cell_seconds(once, 3) > 0.25 > cell_seconds(once, 1)  # the long entry comes at 0.25 s
    assert str(CellTarget(min_requests(w, 3), 0.0, 0, arrivals=describe(w))) == (
        "a script of 5 entries; at least 5 requests"
    )


def test_poisson_schedule_stops_at_its_minimums_and_estimates_cover_the_cell(poisson, tiny_checkpoint):
    exp = load(poisson["decl"])
    w = exp.workload
    plan = Poisson(w, SEED, 3, PromptStream(w, SEED, tiny_checkpoint, width=3))
    sent = plan.due(10**12, 0)  # however late it is asked, it sends only the minimum
    assert [a.request_id for a in sent] == list(range(12)) and plan.next_ns(0) is None
    assert min_requests(w, 3) == 12
    for c in (1, 3):  # at least the time the last arrival takes to come
        assert cell_seconds(exp, c) >= (4 * c - 1) / RATE
    assert cell_seconds(exp, 3) > cell_seconds(exp, 1)
