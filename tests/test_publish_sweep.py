"""A rate sweep on a page: the regime table and the chart show every swept rate, each
rate's figures its own runs' (a real three-rate sweep of the tiny model, measured once)."""

from __future__ import annotations

import json
import re

import duckdb
import pytest
from publish_project import build_site, write_project
from test_declaration import dump
from test_rate_sweep import sweep_doc

from runner.experiments.declaration import load
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress

RATES = (2.0, 4.0, 8.0)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Arms a and b at concurrency 1 and 2, rates 2, 4 and 8 req/s, one round: 12 runs."""
    root = tmp_path_factory.mktemp("sweep")
    decl = root / "sweep.toml"
    decl.write_text(dump(sweep_doc({"process": "poisson", "rate": list(RATES)})))
    db = root / "runs.duckdb"
    assert run_experiment(load(decl), db, Progress(mode="plain")).completed == 12
    con = duckdb.connect(str(db), read_only=True)
    try:
        ttft = con.execute(
            "SELECT r.arm, r.concurrency, r.rate, avg((q.first_token_ns - q.arrival_ns) / 1e6) "
            "FROM requests q JOIN runs r USING (run_id) GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()
    return db, {(a, int(c), float(r)): t for a, c, r, t in ttft}


def page(tmp_path, db, body: str):
    post = f"---\ndate: 2026-11-20\nexperiment: sweep\n---\n# Sweep\n\n{body}\n"
    result = build_site(write_project(tmp_path, db, {"p.md": post}))
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text() if result.ok else ""
    return result, html


def figures(html: str) -> list[dict]:
    return [json.loads(f) for f in re.findall(r"\}\)\((\{.*?\})\);</script>", html)]


def test_the_regime_table_shows_every_swept_rate_with_that_rates_figures(sweep, tmp_path):
    db, ttft = sweep
    result, html = page(tmp_path, db, '{{ regime_table(["ttft_mean_ms", "decode_tps"], base="a") }}')
    assert result.ok, result.warnings
    rows = re.findall(
        r'<tr class="bothrows-pair-row" data-chip="[^"]*" data-arm="(\w)" data-concurrency="(\d)" '
        r'data-rate="([\d.]+)">\n<td>.*?</td><td>[^<]*</td><td>([\d.]+)</td>\s*<td>([\d,.]+)',
        html,
    )
    assert all(r == shown_rate for *_, r, shown_rate, _ in rows)  # the rate column
    shown = {(a, int(c), float(r)): float(v.replace(",", "")) for a, c, r, _, v in rows}
    assert sorted(shown) == sorted(ttft)  # every arm x concurrency x rate, each once
    assert len(rows) == 12
    for cell, value in shown.items():  # each row holds its own rate's runs
        assert value == pytest.approx(ttft[cell], abs=0.051)
    assert "one row per offered rate (2, 4, 8 req/s)" in html


def test_rate_picks_one_rate_and_an_unswept_rate_is_one_clear_failure(sweep, tmp_path):
    db, _ = sweep
    result, html = page(tmp_path / "one", db, '{{ regime_table(["ttft_mean_ms"], rate=4) }}')
    assert result.ok, result.warnings
    assert set(re.findall(r'bothrows-pair-row" [^>]*data-rate="([\d.]+)"', html)) == {"4"}
    bad, _ = page(tmp_path / "bad", db, '{{ regime_table(["ttft_mean_ms"], rate=3) }}')
    failures = [w for w in bad.warnings if "rate 3 is not a swept rate" in w]
    assert not bad.ok and len(failures) == 1 and "(swept: 2, 4, 8 req/s)" in failures[0]


def test_the_chart_of_a_sweep_draws_every_rate(sweep, tmp_path):
    db, ttft = sweep
    body = '{{ chart("ttft_mean_ms") }}\n\n{{ chart("ttft_mean_ms", x="concurrency") }}'
    result, html = page(tmp_path, db, body)
    assert result.ok, result.warnings
    by_rate, by_conc = figures(html)
    lines = {t["name"]: t for t in by_rate["data"]}
    assert sorted(lines) == [f"{a}, concurrency {c}" for a in "ab" for c in (1, 2)]
    for (a, c), t in {(n[0], int(n[-1])): t for n, t in lines.items()}.items():
        assert t["x"] == list(RATES)
        assert t["y"] == pytest.approx([ttft[(a, c, r)] for r in RATES])
    names = sorted(t["name"] for t in by_conc["data"])
    assert names == sorted(f"{a} at {r:g} req/s" for a in "ab" for r in RATES)
    assert all(len(t["x"]) == 2 for t in by_conc["data"])  # concurrency 1 and 2
    assert "by offered rate;" in html and "by concurrency at 2 req/s, 4 req/s, 8 req/s;" in html


def test_a_value_on_a_sweep_names_its_rate(sweep, tmp_path):
    db, ttft = sweep
    stated = f"{ttft[('b', 2, 4.0)]:.1f}"
    body = (
        f'{{{{ claim("{stated}", metric("ttft_mean_ms", arm="b", concurrency=2, rate=4)) }}}}\n\n'
        '{{ claim("1", metric("ttft_mean_ms", arm="b", concurrency=2)) }}\n\n'
        '{{ claim("1", gain("ttft_mean_ms", arm="b", base="a", concurrency=2)) }}\n\n'
        '{{ claim("1", metric("ttft", arm="b", concurrency=2, q=0.95)) }}'
    )
    result, _ = page(tmp_path, db, body)
    named = [w for w in result.warnings if "name one (rate=...)" in w]
    assert len(named) == 3 and all("sweeps the offered rate (2, 4, 8 req/s)" in w for w in named)
    assert not [w for w in result.warnings if f"stated '{stated}'" in w]  # its own rate's figure
