"""Cells sized by time and tokens, alike for every arm; the run's estimate; `--aa`.
A real random checkpoint, the real engine and a real DuckDB file."""

from __future__ import annotations

import dataclasses
import io
import json
import textwrap
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from runner.cli import main as cli
from runner.experiments.cell_plan import plan_cells
from runner.experiments.declaration import Workload, load
from runner.experiments.estimate import cell_seconds, estimate_seconds
from runner.experiments.execute import needs_more
from runner.experiments.progress import CellLabel, CellTarget, Progress
from runner.train.random_init import write_random_checkpoint

MIN_SECONDS, MIN_TOKENS, PER_CLIENT = 0.25, 40, 1
WIDTH = 2  # the declaration's largest concurrency: request_id = i * WIDTH + client
# The rule reads the clock just after a pass's events are stamped (and after the next pass
# is queued), so a client's last finish may be stamped this much before the minimum.
CLOCK_SLACK_NS = 20_000_000


def declaration(model: Path) -> str:
    return textwrap.dedent(f"""\
        title = "sizing"
        model = "{model}"
        seed = 5
        rounds = 2
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        requests_per_client = {PER_CLIENT}
        prompt_tokens = [8, 16]
        max_new_tokens = 4
        min_cell_seconds = {MIN_SECONDS}
        min_cell_tokens = {MIN_TOKENS}

        [engine]
        max_batch_size = 2

        [arms.off]
        mtp = false

        [arms.on]
        mtp = true
        """)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizing")
    decl = root / "sizing.toml"
    decl.write_text(declaration(write_random_checkpoint(root / "model", seed=4)))
    db = root / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--json"]) == 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.run_id, r.arm, r.concurrency, r.round, q.request_id, q.client, "
            "q.prompt_tokens, q.output_tokens, q.arrival_ns, q.done_ns, q.output_sha256 "
            "FROM runs r JOIN requests q USING (run_id) ORDER BY q.done_ns"
        ).fetchall()
    finally:
        con.close()
    cells = defaultdict(list)
    for run_id, arm, conc, rnd, *request in rows:
        cells[(arm, conc, rnd)].append(
            dict(zip(("request_id", "client", "prompt", "tokens", "arrival", "done", "sha"), request))
        )
    return decl, db, cells


def test_needs_more_holds_until_every_minimum_is_reached():
    w = Workload(
        prompts="heldout",
        prompt_tokens=(8, 16),
        max_new_tokens=4,
        requests_per_client=2,
        min_cell_seconds=1.0,
        min_cell_tokens=10,
    )
    assert needs_more(w, 1, 5 * 10**9, 100)  # fewer than requests_per_client
    assert needs_more(w, 2, 999_999_999, 100)  # not yet 1 s
    assert needs_more(w, 2, 10**9, 9)  # not yet 10 tokens
    assert not needs_more(w, 2, 10**9, 10)


def test_every_arm_s_cell_reaches_both_minimums_and_stops_there(measured):
    _, _, cells = measured
    assert len(cells) == 8
    for (arm, conc, rnd), reqs in cells.items():
        assert sum(r["tokens"] for r in reqs) >= MIN_TOKENS, (arm, conc, rnd)
        assert len(reqs) > conc * PER_CLIENT  # the request count alone would have stopped sooner
        for client in range(conc):
            mine = sorted((r for r in reqs if r["client"] == client), key=lambda r: r["request_id"])
            last = max(mine, key=lambda r: r["done"])
            assert last["done"] >= MIN_SECONDS * 1e9 - CLOCK_SLACK_NS, (arm, conc, rnd, client)
            assert sum(r["tokens"] for r in reqs if r["done"] <= last["done"]) >= MIN_TOKENS
            for prev, req in zip(mine, mine[1:]):  # each request past the minimum count was
                if req["request_id"] // WIDTH < PER_CLIENT:  # sent while a minimum was unmet
                    continue
                before = sum(r["tokens"] for r in reqs if r["done"] < prev["done"])
                assert prev["done"] < MIN_SECONDS * 1e9 or before + prev["tokens"] < MIN_TOKENS, (
                    arm,
                    conc,
                    rnd,
                    req,
                )


def test_request_ids_and_prompts_are_the_same_in_every_arm_and_round(measured):
    _, _, cells = measured
    by_id = defaultdict(set)
    for (arm, conc, rnd), reqs in cells.items():
        for client in range(conc):
            ids = sorted(r["request_id"] for r in reqs if r["client"] == client)
            assert ids == [i * WIDTH + client for i in range(len(ids))]  # client's 0th, 1st, ...
        for r in reqs:
            # greedy MTP is lossless: the same prompt gives the same output in both arms
            by_id[r["request_id"]].add((r["prompt"], r["sha"]))
    assert by_id and all(len(v) == 1 for v in by_id.values())
    for conc in (1, 2):
        for rnd in (0, 1):  # paired by (round, request_id): a common prefix
            off, on = ({r["request_id"] for r in cells[(a, conc, rnd)]} for a in ("off", "on"))
            assert min(len(off), len(on)) > conc * PER_CLIENT


def test_progress_reports_the_minimums(measured, tmp_path):
    decl, _, _ = measured
    exp = load(decl)
    stream = io.StringIO()
    progress = Progress(stream=stream, mode="json")
    progress.plan([cell_seconds(exp, c.concurrency) for c in plan_cells(exp)])
    label = CellLabel(1, 8, "off", 2, 0)
    progress.cell_started(label, CellTarget(2, MIN_SECONDS, MIN_TOKENS, progress.estimates[0]))
    progress.cell_finished(label, "complete", 60, progress.estimates[0] * 2, requests=9)
    started, finished = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (started["min_requests"], started["min_seconds"], started["min_tokens"]) == (2, 0.25, 40)
    assert finished["requests"] == 9
    # the first cell took twice its estimate: the other seven are expected to as well
    assert progress.eta() == pytest.approx(2 * sum(progress.estimates[1:]))
    assert CellTarget(4, 2.0, 0).fraction(requests=4, seconds=1.0, tokens=5) == 0.5


def test_the_estimate_covers_the_minimums_and_shrinks_with_quick(measured):
    decl, _, _ = measured
    exp = load(decl)
    cells = plan_cells(exp)
    full = estimate_seconds(exp, cells)
    assert full > len(cells) * MIN_SECONDS
    assert all(cell_seconds(exp, c) >= MIN_SECONDS for c in (1, 2))
    longer = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, min_cell_seconds=5.0))
    assert estimate_seconds(longer, cells) - full >= len(cells) * (5.0 - MIN_SECONDS) * 0.99
    quick = exp.shrunk()
    assert estimate_seconds(quick, plan_cells(quick)) < full
    assert estimate_seconds(exp, cells[:2]) < full
    timed = sum(cell_seconds(exp, c.concurrency) for c in cells)
    arms, rounds = len({c.arm for c in cells}), len({c.round for c in cells})
    per_start = (full - timed) / arms  # one load and warm-up per arm ...
    assert per_start > 0 and rounds > 1
    restarted = estimate_seconds(dataclasses.replace(exp, restart_every=1), cells)
    assert restarted - timed == pytest.approx(arms * rounds * per_start)  # ... or per arm and round


def test_aa_measures_an_arm_against_its_identical_copy_under_name_aa(measured, tmp_path):
    decl, db, _ = measured
    aa_db = tmp_path / "aa.duckdb"
    assert cli(["run", str(decl), "--aa", "on", "--quick", "--db", str(aa_db)]) == 0
    con = duckdb.connect(str(aa_db), read_only=True)
    try:
        runs = con.execute(
            "SELECT experiment, arm, concurrency, knobs, status FROM runs ORDER BY started_at"
        ).fetchall()
    finally:
        con.close()
    assert [r[:3] for r in runs] == [
        ("sizing-aa", "on", 1),
        ("sizing-aa", "on-aa", 1),
        ("sizing-aa", "on-aa", 2),  # counterbalanced: B A at the next concurrency
        ("sizing-aa", "on", 2),
    ]
    assert len({r[3] for r in runs}) == 1 and json.loads(runs[0][3])["mtp"] is True
    assert {r[4] for r in runs} == {"complete"}
