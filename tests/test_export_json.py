"""`runner export NAME --format json`: it parses, every cell has vllm bench serve's keys,
and its figures are the page's (a real mkdocs build of a post over the same database)."""

from __future__ import annotations

import json
import re

from fixture_db import EXPERIMENT, build_fixture
from publish_project import build_site, write_project

from runner.cli import main as cli
from runner.publish.metrics import METRICS

KEYS = ("completed", "request_throughput", "output_throughput") + tuple(
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")
)
POST = """\
---
date: 2026-11-20
experiment: spec-fixture
---
# Figures

{{ regime_table(["ttft_p99_ms", "request_rps", "e2el_p50_ms", "aggregate_tps"], folded=False) }}
"""


def test_the_json_export_has_the_keys_of_every_cell_and_the_pages_figures(tmp_path, capsys):
    db = tmp_path / "runs.duckdb"
    build_fixture(db, passes_per_run=10)
    out = tmp_path / "summary.json"
    assert cli(["export", EXPERIMENT, "--db", str(db), "--format", "json", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "bothrows-summary/1" and doc["experiment"] == EXPERIMENT
    cells = doc["cells"]
    assert len(cells) == 2 * 2 * 3  # chips x arms x concurrencies
    for cell in cells:
        missing = [k for k in KEYS if not isinstance(cell.get(k), (int, float))]
        assert not missing, (cell["chip"], cell["arm"], cell["concurrency"], missing)
        lo, hi = cell["intervals"]["median_itl_ms"]  # every token gap of the cell's requests
        assert lo <= cell["median_itl_ms"] <= hi
        assert "p99_ttft_ms" not in cell["intervals"]  # 2 rounds x 2 requests a client: too few for a p99
    # The page's regime table prints the same figures at its precision.
    config = write_project(tmp_path, db, {"p.md": POST})
    result = build_site(config)
    assert result.ok, result.warnings
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text()
    for cell in cells:
        row = re.search(
            rf'data-chip="{cell["chip"]}" data-arm="{cell["arm"]}" data-concurrency="{cell["concurrency"]}">'
            r"(.*?)</tr>",
            html,
            re.S,
        )
        shown = re.findall(r"<td>([0-9.,]+)(?:<br>|</td>)", row.group(1))[1:]  # after the concurrency
        want = [
            f"{cell[k]:,.{METRICS[m].decimals}f}"
            for k, m in (
                ("p99_ttft_ms", "ttft_p99_ms"),
                ("request_throughput", "request_rps"),
                ("median_e2el_ms", "e2el_p50_ms"),
                ("output_throughput", "aggregate_tps"),
            )
        ]
        assert shown == want, (cell["chip"], cell["arm"], cell["concurrency"])
    # To stdout without --out; an unknown experiment is one line and exit code 2.
    capsys.readouterr()
    assert cli(["export", EXPERIMENT, "--db", str(db), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    assert cli(["export", "nope", "--db", str(db), "--format", "json"]) == 2
    assert "no complete runs of experiment 'nope'" in capsys.readouterr().err
