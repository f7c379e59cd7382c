"""Capacity under an SLO from a rate sweep: a known breaking point is found inside its
interval; "at least the top rate" when nothing breaks; claimable in a real mkdocs build."""

from __future__ import annotations

import json
import re
from datetime import datetime

import numpy as np
from publish_project import build_site, write_project

from runner.publish.stats.capacity import capacity, crossing
from runner.store.cell import CellRecord
from runner.store.store import Store

CHIP = {
    "name": "Sweep CPU",
    "device": "cpu",
    "cores": 2,
    "memory_bytes": 1 << 30,
    "os": "Linux",
    "mlx_version": "0.0",
    "blas": "openblas",
    "python": "3.11",
}
RATES = (1.0, 2.0, 4.0, 8.0)


def sweep_db(path, met_of_rate: dict[float, int], n: int = 20, rounds: int = 3) -> None:
    """One arm at concurrency 1, SLO TTFT 100 ms: at each rate, `met_of_rate[rate]` of every
    round's n requests answer in 50 ms, the rest in 500 ms."""
    with Store.open(path) as st:
        chip_id = st.ensure_chip(CHIP)
        for rnd in range(rounds):
            for rate in RATES:
                run = st.begin_run(
                    CellRecord("sweep", "d" * 64, "a", 1, rnd, 1, False, slo_ttft_ms=100.0, rate=rate),
                    chip_id=chip_id,
                    model_sha256="m" * 64,
                    code_version="abc",
                    knobs={"max_batch_size": 1},
                    started_at=datetime(2026, 11, 19, 8, rnd, int(rate)),
                )
                rows = []
                for i in range(n):
                    ttft = 50_000_000 if i < met_of_rate[rate] else 500_000_000
                    at = i * 1_000_000_000
                    rows.append(
                        dict(
                            request_id=i,
                            client=0,
                            prompt_tokens=8,
                            output_tokens=4,
                            cached_tokens=0,
                            arrival_ns=at,
                            first_token_ns=at + ttft,
                            done_ns=at + ttft + 30_000_000,
                            output_sha256=None,
                            label=None,
                            asked_tokens=4,
                        )
                    )
                st.append_requests(run, rows)
                st.finish_run(run, "complete")


def test_crossing_interpolates_between_the_last_rate_that_met_and_the_first_that_did_not():
    value, at_least, below = crossing(RATES, (1.0, 1.0, 0.95, 0.5), 0.9)
    assert abs(value - (4.0 + 4.0 * 0.05 / 0.45)) < 1e-12 and not at_least and not below
    assert crossing(RATES, (1.0, 1.0, 1.0, 0.95), 0.9) == (8.0, True, False)
    assert crossing(RATES, (0.5, 0.4, 0.3, 0.2), 0.9) == (None, False, True)


def test_a_known_breaking_point_is_inside_its_interval():
    rng = np.random.default_rng(0)
    truth = {1.0: 1.0, 2.0: 0.98, 4.0: 0.94, 8.0: 0.4}  # crosses 0.9 at 4 + 4 * 0.04 / 0.54
    met = {r: {k: (rng.random(60) < p).astype(float) for k in range(3)} for r, p in truth.items()}
    cap = capacity(met, 0.9, "x")
    known = 4.0 + 4.0 * 0.04 / 0.54
    assert cap.lo <= known <= cap.hi and 2.0 <= cap.lo <= cap.value <= cap.hi <= 8.0
    assert capacity(met, 0.9, "x") == cap  # seeded


POST = """\
---
date: 2026-11-20
experiment: sweep
---
# Capacity

The arm takes {{{{ claim("{stated}", capacity(arm="a", attainment=0.9)) }}}} under the SLO.
"""


def test_capacity_is_claimable_and_at_least_the_top_rate_when_nothing_breaks(tmp_path):
    db = tmp_path / "sweep.duckdb"
    sweep_db(db, {1.0: 20, 2.0: 20, 4.0: 19, 8.0: 10})  # 95% at 4, 50% at 8: 4.44 req/s
    config = write_project(tmp_path / "a", db, {"p.md": POST.format(stated="4.44")})
    result = build_site(config)
    assert result.ok, result.warnings
    wrong = write_project(tmp_path / "b", db, {"p.md": POST.format(stated="6.5")})
    failed = build_site(wrong)
    claim = [w for w in failed.warnings if "stated '6.5'" in w]
    assert len(claim) == 1 and "measured 4.44 req/s (95% interval " in claim[0]
    held = tmp_path / "held.duckdb"
    sweep_db(held, {1.0: 20, 2.0: 20, 4.0: 20, 8.0: 19})
    config = write_project(tmp_path / "c", held, {"p.md": POST.format(stated="8")})
    result = build_site(config)
    claim = [w for w in result.warnings if "stated '8'" in w]
    assert not result.ok and len(claim) == 1
    assert "capacity is at least the top rate, 8 req/s" in claim[0]


CHARTS = """\
---
date: 2026-11-20
experiment: sweep
---
# Load

{{ capacity_chart() }}

{{ pareto_chart() }}
"""


def test_the_capacity_and_pareto_charts_draw_every_rate_and_the_slo(tmp_path):
    db = tmp_path / "sweep.duckdb"
    sweep_db(db, {1.0: 20, 2.0: 20, 4.0: 19, 8.0: 10})
    config = write_project(tmp_path, db, {"p.md": CHARTS})
    result = build_site(config)
    assert result.ok, result.warnings
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text()
    figures = [json.loads(f) for f in re.findall(r"\}\)\((\{.*?\})\);</script>", html)]
    assert len(figures) == 5 + 1  # goodput, TTFT and TPOT p90/p99; the Pareto chart
    goodput, ttft90 = figures[0], figures[1]
    assert goodput["data"][0]["x"] == [1.0, 2.0, 4.0, 8.0] and len(goodput["data"][0]["y"]) == 4
    slo = [s for s in ttft90["layout"]["shapes"] if s.get("y0") == 100.0]
    assert len(slo) == 1 and slo[0]["line"]["dash"] == "dash"  # the declared TTFT limit
    assert not [s for s in goodput["layout"]["shapes"] if s.get("y0") == 100.0]
    pareto = figures[-1]["data"][0]
    assert len(pareto["x"]) == 4 and pareto["x"] == sorted(pareto["x"])  # one point per rate
    assert "one point per concurrency and offered rate" in html


def test_audit_capacity_prints_every_cell_with_its_interval_and_says_at_least_or_not_a_sweep(
    tmp_path, capsys
):
    """`runner audit --capacity NAME`: an experiment no post cites yet gets its capacity
    with the same figure a claim reads; "at least" when nothing breaks; a non-sweep is one
    line and exit 1."""
    from runner.cli import main

    db = tmp_path / "sweep.duckdb"
    sweep_db(db, {1.0: 20, 2.0: 20, 4.0: 19, 8.0: 10})
    config = write_project(tmp_path / "a", db, {})
    argv = ["audit", "--config-file", str(config), "--database", str(db), "--capacity", "sweep"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = re.search(
        r"^  Sweep, 2 cores \(\w{8}\) a concurrency 1: capacity 4.44 req/s, 95% \[([\d.]+) to ([\d.]+)\]$",
        out,
        re.M,
    )
    assert line and float(line[1]) <= 4.44 <= float(line[2]), out
    assert "attainment by rate: 1 req/s 100%, 2 req/s 100%, 4 req/s 95%, 8 req/s 50%" in out
    assert main([*argv, "--attainment", "0.4"]) == 0
    assert "capacity at least the top rate, 8 req/s" in capsys.readouterr().out
    assert main([*argv[:-1], "nothing"]) == 2  # bad input: one line on stderr
    assert "runner audit: experiment 'nothing' has no complete runs" in capsys.readouterr().err
    assert main([*argv, "--attainment", "0"]) == 2
    assert "--attainment is a share in (0, 1], got 0.0" in capsys.readouterr().err


def test_rates_keeps_a_chart_to_the_named_rates_and_an_unswept_rate_is_one_error(tmp_path):
    """A re-declared sweep keeps its old rates' runs: rates= draws one declaration's."""
    db = tmp_path / "sweep.duckdb"
    sweep_db(db, {1.0: 20, 2.0: 20, 4.0: 19, 8.0: 10})
    post = CHARTS.replace("capacity_chart()", 'capacity_chart(metrics=["goodput_rps"], rates=[1, 2, 4])')
    post = post.replace("pareto_chart()", "pareto_chart(rates=[2, 4])")
    result = build_site(write_project(tmp_path / "a", db, {"p.md": post}))
    assert result.ok, result.warnings
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text()
    goodput, pareto = [json.loads(f) for f in re.findall(r"\}\)\((\{.*?\})\);</script>", html)]
    assert goodput["data"][0]["x"] == [1.0, 2.0, 4.0]
    assert len(pareto["data"][0]["x"]) == 2
    wrong = CHARTS.replace("capacity_chart()", "capacity_chart(rates=[3])")
    failed = build_site(write_project(tmp_path / "b", db, {"p.md": wrong}))
    problems = [w for w in failed.warnings if "was not swept" in w]
    assert not failed.ok and len(problems) == 1
    assert "capacity_chart: rate 3 was not swept (swept rates: 1, 2, 4, 8)" in problems[0]
