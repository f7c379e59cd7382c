"""Errored requests: against a real mlx_lm.server (conftest's `server`), stopped (SIGSTOP)
while one arm's cells run, so each of that arm's requests gets no answer within its read
timeout and errors (a real stall, not a stub). The cell still completes; each errored
request is stored with what happened and no first token; the page's table row says how
many errored; a claim on that cell fails with that reason; the other arm's cell and claim
are untouched; the JSON export counts them."""

from __future__ import annotations

import json
import os
import signal
import textwrap

import duckdb
from publish_project import build_site, write_project

from runner.cli import main as cli
from runner.experiments.declaration import load
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress


class StopServerInStalledCells(Progress):
    """The server stops (SIGSTOP) as each `stalled` cell starts and goes on when it ends."""

    def __init__(self, pid: int):
        super().__init__(mode="plain")
        self.pid = pid

    def cell_started(self, cell, target):
        super().cell_started(cell, target)
        if cell.arm == "stalled":
            os.kill(self.pid, signal.SIGSTOP)

    def cell_finished(self, *args, **kwargs):
        os.kill(self.pid, signal.SIGCONT)
        return super().cell_finished(*args, **kwargs)


def declaration(base_url: str) -> str:
    return textwrap.dedent(f"""\
        title = "errored requests"
        model = "tiny"
        seed = 5
        rounds = 2
        concurrency = [1]

        [workload]
        prompts = "heldout"
        prompt_tokens = [8, 12]
        max_new_tokens = 4
        requests_per_client = 2
        min_cell_seconds = 0

        [engine]
        max_batch_size = 1

        [arms.answered]
        runtime = "openai"
        base_url = "{base_url}"

        [arms.stalled]                   # its server is stopped while its cells run
        runtime = "openai"
        base_url = "{base_url}"
        read_timeout_s = 1
        """)


POST = """\
---
date: 2026-11-20
experiment: errs
---
# Errors

Answered: {{ claim("2", metric("completed", arm="answered", concurrency=1)) }} a round.
Stalled: {{ claim("0", metric("completed", arm="stalled", concurrency=1)) }} a round.

{{ regime_table(["completed", "ttft_p50_ms"], base="answered") }}
"""


def test_errored_requests_are_stored_counted_on_the_page_and_fail_a_claim(server, tmp_path):
    base_url, pid = server
    decl = tmp_path / "errs.toml"
    decl.write_text(declaration(base_url))
    db = tmp_path / "runs.duckdb"
    try:
        summary = run_experiment(load(decl), db, StopServerInStalledCells(pid))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert summary.completed == 4 and not summary.faults
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.arm, r.status, q.error IS NOT NULL, q.first_token_ns IS NULL, q.error "
            "FROM requests q JOIN runs r USING (run_id) ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()
    answered = [r for r in rows if r[0] == "answered"]
    stalled = [r for r in rows if r[0] == "stalled"]
    assert len(answered) == 4 and all(r[1:4] == ("complete", False, False) for r in answered)
    assert len(stalled) == 4 and all(r[1:4] == ("complete", True, True) for r in stalled)
    assert {r[4] for r in stalled} == {f"openai at {base_url}: did not answer within 1 s"}

    result = build_site(write_project(tmp_path / "site", db, {"p.md": POST}))
    claims = [w for w in result.warnings if "stated '" in w]
    assert not result.ok and len(claims) == 1, result.warnings
    assert "stated '0'" in claims[0] and "4 of 4 requests errored in the cells behind it" in claims[0]
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text()
    assert html.count('class="bothrows-errored"') == 2  # the stalled row: the pair and the full grid
    assert ">4 errored</abbr>" in html and "4 of 4 requests errored (no answer" in html

    out = tmp_path / "errs.json"
    assert cli(["export", "errs", "--db", str(db), "--format", "json", "--out", str(out)]) == 0
    cells = {c["arm"]: c for c in json.loads(out.read_text())["cells"]}
    assert cells["stalled"]["errored_requests_total"] == 4 and cells["stalled"]["completed"] == 0
    assert cells["answered"]["errored_requests_total"] == 0 and cells["answered"]["completed"] == 2
