"""Absent is not zero: a runtime without per-pass rows (a server) leaves the per-pass
metrics NULL, a claim on one fails with "not measured by runtime X", and the drafted-passes
chart says so in one line instead of drawing the arm as an empty or zero bar."""

import re
from pathlib import Path

import pytest
from fixture_db import DECLARATION, DEFAULT_CHIPS, EXPERIMENT, MODEL, _run_rows, build_fixture
from publish_project import build_site, dedent, write_project

from runner.publish.metrics import PER_PASS
from runner.publish.sql.reader import Reader
from runner.store.cell import CellRecord
from runner.store.store import Store

CHIP = DEFAULT_CHIPS[0]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """The fixture's off/on arms (our engine, with passes) plus arm 'served', measured on
    mlx-lm-server: requests only."""
    import random

    path = tmp_path_factory.mktemp("absent") / "runs.duckdb"
    fx = build_fixture(path, chips=(CHIP,), passes_per_run=10)
    rng = random.Random(3)
    with Store.open(path) as st:
        for c in (1, 2, 4):
            for r in range(2):
                requests, _ = _run_rows(rng, CHIP, "off", c, 2, 0)
                run = st.begin_run(
                    CellRecord(
                        experiment=EXPERIMENT,
                        declaration_sha256=DECLARATION,
                        arm="served",
                        concurrency=c,
                        round=r,
                        seed=0,
                        quick=False,
                        runtime="mlx-lm-server",
                    ),
                    chip_id=fx.chip_ids[CHIP.name],
                    model_sha256=MODEL,
                    code_version="abc1234",
                    knobs={"runtime": "mlx-lm-server"},
                )
                st.append_requests(
                    run, [{**q, "cached_tokens": None, "output_sha256": None} for q in requests]
                )
                st.finish_run(run, "complete")
    return path


def test_per_pass_metrics_of_a_run_without_passes_are_null_not_zero(db):
    with Reader(db) as reader:
        values = reader.run_values(EXPERIMENT, False)
        runtimes = reader.arms.arm_runtimes(EXPERIMENT, False)
    served = [v for (_, arm, _, _), v in values.items() if arm == "served"]
    assert len(served) == 6
    assert all(v[m] is None for v in served for m in PER_PASS)
    assert all(v["decode_tps"] > 0 and v["ttft_p50_ms"] > 0 for v in served)
    ours = [v for (_, arm, _, _), v in values.items() if arm == "off"]
    assert all(v["passes"] == 10 and v["drafted_passes"] == 0 for v in ours)  # a real zero
    assert runtimes == {
        "off": ("bothrows", True),
        "on": ("bothrows", True),
        "served": ("mlx-lm-server", False),
    }


POST = dedent("""\
    ---
    date: 2026-11-20
    experiment: {experiment}
    ---
    # A server beside our engine

    It drafted {{{{ claim("40",
        metric("drafted_passes", arm="served", concurrency=1, chip="Fixture M1")) }}}} times.
    Ours drafted {{{{ claim("12%",
        gain("drafted_passes", arm="served", base="on", concurrency=1, chip="Fixture M1")) }}}} more.

    {{{{ drafted_by_width_chart() }}}}
    """)


def test_a_claim_on_an_absent_metric_says_which_runtime_and_the_chart_says_so(db, tmp_path):
    config = write_project(tmp_path, db, {"p.md": POST.format(experiment=EXPERIMENT)})
    strict = build_site(config)
    assert not strict.ok
    claims = [w for w in strict.warnings if "blog/posts/p.md" in w and "claim" in w]
    assert len(claims) == 2
    assert all(w.endswith("not measured by runtime mlx-lm-server") for w in claims), claims
    relaxed = build_site(config, strict=False, site=tmp_path / "relaxed")
    html = next(relaxed.site.glob("blog/20*/**/index.html")).read_text()
    assert html.count("Drafted passes not measured by runtime mlx-lm-server (arm served).") == 1
    traces = re.findall(r'"name":"([^"]*)"', html)  # the chart's bars: our arms only
    assert traces == ["off", "on"]
