"""Rate sweeps: a list of rates is a cell dimension (arm x concurrency x rate x round), each
rate's arrivals the same in every arm; gamma arrivals with burstiness; one real run."""

from __future__ import annotations

import json
import statistics
from itertools import islice
from pathlib import Path

import duckdb
import pytest
from test_declaration import dump, valid_doc

from runner.cli import main as cli
from runner.experiments.cell_plan import plan_cells
from runner.experiments.declaration import DeclarationError, load, parse
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress
from runner.experiments.workloads.arrivals import gamma_gaps, poisson_gaps
from runner.report import data_state

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "runner" / "models" / "tiny"


def sweep_doc(arrivals: dict) -> dict:
    doc = valid_doc(TINY)
    doc["workload"] = {
        "prompts": "heldout",
        "requests_per_client": 2,
        "prompt_tokens": [8, 16],
        "max_new_tokens": 4,
        "min_cell_seconds": 0,
        "arrivals": arrivals,
    }
    doc["rounds"] = 1
    doc["arms"] = {"a": {"compile": False}, "b": {"compile": False, "pipeline": False}}
    return doc


def declared(arrivals: dict):
    return parse(dump(sweep_doc(arrivals)).encode(), source="x.toml", name="x")


def test_a_three_rate_sweep_runs_and_stores_every_cell_with_the_same_arrivals_in_every_arm(tmp_path):
    decl = tmp_path / "sweep.toml"
    decl.write_text(dump(sweep_doc({"process": "poisson", "rate": [2, 4, 8]})))
    exp = load(decl)
    cells = plan_cells(exp)
    assert len(cells) == 2 * 2 * 3 and [c.rate for c in cells[:6]] == [2.0, 2.0, 4.0, 4.0, 8.0, 8.0]
    db = tmp_path / "runs.duckdb"
    summary = run_experiment(exp, db, Progress(mode="plain"))
    assert summary.completed == 12 and not summary.faults
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute(
            "SELECT arm, concurrency, rate, count(*) FROM runs GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        arrivals = con.execute(
            "SELECT r.rate, r.concurrency, q.request_id, list(DISTINCT q.arrival_ns), count(*) "
            "FROM requests q JOIN runs r USING (run_id) GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()
    assert runs == [(a, c, r, 1) for a in "ab" for c in (1, 2) for r in (2.0, 4.0, 8.0)]
    assert arrivals and all(n == 2 and len(at) == 1 for *_, at, n in arrivals)  # both arms, same time
    # every cell is complete: running it again measures nothing
    assert run_experiment(load(decl), db, Progress(mode="plain")).skipped == 12
    # The JSON export has every (arm, concurrency, rate) cell, with vllm bench serve's keys.
    out = tmp_path / "sweep.json"
    assert cli(["export", "sweep", "--db", str(db), "--format", "json", "--out", str(out)]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert sorted((c["arm"], c["concurrency"], c["rate"]) for c in cells) == [
        (a, k, r) for a in "ab" for k in (1, 2) for r in (2.0, 4.0, 8.0)
    ]
    for c in cells:
        assert c["request_throughput"] > 0 and c["p99_ttft_ms"] > 0 and c["rounds"] == 1
        assert c["completed"] == (4 if c["concurrency"] == 2 else 2)  # requests_per_client x c
    # `make report` counts the sweep complete only with every rate's cells
    assert data_state(db, load(decl)).complete
    con = duckdb.connect(str(db))
    con.execute("UPDATE runs SET status = 'failed' WHERE rate = 8")
    con.close()
    assert not data_state(db, load(decl)).complete


def test_gamma_gaps_keep_the_rate_and_burstiness_spreads_them():
    poisson = list(islice(poisson_gaps(3, 4.0), 4000))
    bursty = list(islice(gamma_gaps(3, 4.0, 0.25), 4000))
    assert list(islice(gamma_gaps(3, 4.0, 0.25), 10)) == bursty[:10]  # seeded
    for gaps in (poisson, bursty):
        assert statistics.mean(gaps) / 1e9 == pytest.approx(0.25, rel=0.15)
    assert statistics.stdev(bursty) > 1.5 * statistics.stdev(poisson)  # CV 2 vs 1
    w = declared({"process": "gamma", "rate": 2.0, "burstiness": 0.5}).workload
    assert (w.rate, w.burstiness, w.rates) == (2.0, 0.5, ())
    assert (
        'arrivals = { process = "gamma", rate = 2.0, burstiness = 0.5 }'
        in declared({"process": "gamma", "rate": 2.0, "burstiness": 0.5}).to_toml()
    )


def test_a_single_rate_keeps_its_meaning():
    exp = declared({"process": "poisson", "rate": 2.5})
    assert exp.workload.rates == () and exp.workload.rate == 2.5
    assert {c.rate for c in plan_cells(exp)} == {None}
    assert 'arrivals = { process = "poisson", rate = 2.5 }' in exp.to_toml()


@pytest.mark.parametrize(
    "arrivals, key, reason",
    [
        ({"process": "poisson", "rate": []}, "workload.arrivals.rate", "distinct rates"),
        ({"process": "poisson", "rate": [1, 1]}, "workload.arrivals.rate", "distinct rates"),
        ({"process": "poisson", "rate": [1, -2]}, "workload.arrivals.rate", "distinct rates"),
        ({"process": "gamma", "rate": 1}, "workload.arrivals.burstiness", "required key is missing"),
        ({"process": "poisson", "rate": 1, "burstiness": 0.5}, "workload.arrivals.burstiness", "only with"),
        ({"process": "weibull", "rate": 1}, "workload.arrivals.process", 'expected "poisson" or "gamma"'),
    ],
)
def test_a_bad_sweep_or_process_is_one_error_naming_the_key(arrivals, key, reason):
    with pytest.raises(DeclarationError) as err:
        declared(arrivals)
    assert (
        len(err.value.issues) == 1
        and str(err.value).startswith(f"x.toml: {key}: ")
        and reason in str(err.value)
    )
