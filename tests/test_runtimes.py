"""Other runtimes against the real thing, on the shipped tiny checkpoint:

- an `openai` arm pointed at an mlx_lm.server started as a user would (conftest's
  `server` fixture: loopback, a free port, stopped afterwards even when a test fails);
- an `mlx-lm-server` arm the runner starts itself, an `mlx-lm` in-process arm, and
  `openai` arms pointed at a closed port and at a wrong path.

Workloads are a few requests of a few tokens so the file stays short on a small machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from mlx_server import TINY, free_port, server_pids

from runner.cli import main as cli
from runner.experiments.closed_loop import run_cell
from runner.experiments.declaration import load
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress
from runner.experiments.workloads.workload import PromptStream
from runner.runtimes import RuntimeFault, start

REPO = Path(__file__).resolve().parents[1]


def declaration(arms: str, min_cell_seconds: float = 0) -> str:
    return textwrap.dedent(f"""\
        title = "runtimes"
        model = "tiny"
        seed = 5
        rounds = 1
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        requests_per_client = 2
        prompt_tokens = [8, 16]
        max_new_tokens = 4
        min_cell_seconds = {min_cell_seconds}

        [engine]
        max_batch_size = 2
        """) + textwrap.dedent(arms)


def query(db: Path, sql: str):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_four_runtimes_in_one_run_and_a_closed_port_costs_only_its_cells(server, tmp_path, capsys):
    base_url, _ = server
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    decl = tmp_path / "four.toml"
    decl.write_text(
        declaration(f"""
        [arms.ours]
        compile = false

        [arms.mlx]
        runtime = "mlx-lm"

        [arms.served]
        runtime = "mlx-lm-server"

        [arms.remote]
        runtime = "openai"
        base_url = "{base_url}"

        [arms.dead]
        runtime = "openai"
        base_url = "{dead}"
        """)
    )
    db = tmp_path / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--json", "--no-openblas"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    failed = [json.loads(line) for line in err.splitlines() if '"status": "failed"' in line]
    assert [(f["arm"], f["concurrency"]) for f in failed] == [("dead", 1), ("dead", 2)]
    assert all(f["reason"] == f"openai at {dead}: not reachable (connection refused)" for f in failed)
    assert "error: 2 cell(s) failed (arm dead); the other cells are kept" in err
    assert not server_pids()  # the runner's own server is gone
    runs = query(db, "SELECT arm, runtime, status, count(*) FROM runs GROUP BY ALL ORDER BY ALL")
    assert runs == [
        ("dead", "openai", "failed", 2),
        ("mlx", "mlx-lm", "complete", 2),
        ("ours", "bothrows", "complete", 2),
        ("remote", "openai", "complete", 2),
        ("served", "mlx-lm-server", "complete", 2),
    ]
    # Per-pass rows only where the runtime has them; no request lost anywhere.
    rows = dict(
        query(db, "SELECT r.arm, count(p.run_id) FROM runs r LEFT JOIN passes p USING (run_id) GROUP BY 1")
    )
    assert rows["ours"] > 0 and rows["mlx"] == rows["served"] == rows["remote"] == rows["dead"] == 0
    per_arm = query(
        db,
        "SELECT r.arm, r.concurrency, count(*), min(q.output_tokens), "
        "count(q.output_sha256), count(q.cached_tokens) FROM requests q JOIN runs r "
        "USING (run_id) GROUP BY ALL ORDER BY ALL",
    )
    for arm, conc, n, least, shas, cached in per_arm:
        assert n == 2 * conc and least >= 1
        assert shas == (n if arm in ("ours", "mlx") else 0)  # servers stream text, not ids
        assert cached == n  # mlx_lm.server reports its cache use
    # Greedy on the same checkpoint: mlx-lm decodes exactly our engine's tokens.
    same = query(
        db,
        "SELECT count(*), count(*) FILTER (WHERE a.output_sha256 = b.output_sha256) "
        "FROM requests a JOIN runs ra USING (run_id), requests b JOIN runs rb ON "
        "b.run_id = rb.run_id WHERE ra.arm = 'ours' AND rb.arm = 'mlx' AND "
        "ra.concurrency = rb.concurrency AND a.request_id = b.request_id",
    )
    assert same[0][0] == 6 and same[0][1] == 6
    knobs = dict(query(db, "SELECT DISTINCT arm, knobs FROM runs WHERE arm IN ('served', 'remote')"))
    assert json.loads(knobs["served"]) == {
        "runtime": "mlx-lm-server",
        "max_batch_size": 2,
        "prefill_chunk": 2048,
        "prefix_cache_bytes": 0,
        "read_timeout_s": 60.0,
    }
    assert json.loads(knobs["remote"])["base_url"] == base_url


def one_cell(decl: Path, arm: str, concurrency: int = 2):
    exp = load(decl)
    runtime = start(exp.runtime(arm), exp.runtime_knobs(arm), TINY)
    try:
        stream = PromptStream(exp.workload, exp.seed, TINY, width=max(exp.concurrency))
        return run_cell(runtime, stream, concurrency, exp)
    finally:
        runtime.stop()


@pytest.mark.parametrize("arm", ["remote", "mlx", "ours"])
def test_every_request_carries_its_token_times_for_the_tokens_table(server, tmp_path, arm):
    decl = tmp_path / "times.toml"
    decl.write_text(
        declaration(f"""
        [arms.remote]
        runtime = "openai"
        base_url = "{server[0]}"

        [arms.mlx]
        runtime = "mlx-lm"

        [arms.ours]
        compile = false
        """)
    )
    rows = one_cell(decl, arm)
    assert len(rows.requests) == 4 and (rows.passes is None) == (arm != "ours")
    for r in rows.requests:
        times = r["token_ns"]
        assert len(times) == r["output_tokens"] and list(times) == sorted(times)
        assert r["arrival_ns"] < r["first_token_ns"] == times[0] <= times[-1] <= r["done_ns"]
    assert all("token_ns" not in r for r in rows.stored_requests())  # they go to the tokens table
    assert rows.stored_tokens() == {r["request_id"]: r["token_ns"] for r in rows.requests}


def test_a_wrong_path_is_a_one_line_fault_and_a_silent_server_s_requests_error(server, tmp_path):
    base_url, pid = server
    decl = tmp_path / "faults.toml"
    decl.write_text(
        declaration(f"""
        [arms.wrong-path]
        runtime = "openai"
        base_url = "{base_url.removesuffix("/v1")}/nope"

        [arms.slow]
        runtime = "openai"
        base_url = "{base_url}"
        read_timeout_s = 1
        """)
    )
    with pytest.raises(RuntimeFault) as err:
        one_cell(decl, "wrong-path", 1)
    assert str(err.value).startswith(f"openai at {base_url.removesuffix('/v1')}/nope: answered HTTP 404")
    os.kill(pid, signal.SIGSTOP)  # the server stops answering (a real stall, not a stub)
    try:  # each request errors, saying so in one line; the cell goes on and keeps them
        rows = one_cell(decl, "slow", 1)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert rows.requests and {r["error"] for r in rows.requests} == {
        f"openai at {base_url}: did not answer within 1 s"
    }
    assert all(r["first_token_ns"] is None and r["output_tokens"] == 0 for r in rows.requests)


class KillServerInCell(Progress):
    """The runner's mlx_lm.server is killed (SIGKILL) as its arm's first cell starts."""

    def cell_started(self, cell, target):
        super().cell_started(cell, target)
        if cell.arm == "served" and cell.concurrency == 1:
            for pid in server_pids():
                os.kill(pid, signal.SIGKILL)


def test_a_server_dying_in_a_cell_fails_its_cells_and_a_rerun_measures_only_those(tmp_path):
    decl = tmp_path / "dies.toml"
    decl.write_text(
        declaration("""
        [arms.ours]
        compile = false

        [arms.served]
        runtime = "mlx-lm-server"
        """)
    )
    exp, db = load(decl), tmp_path / "runs.duckdb"
    summary = run_experiment(exp, db, KillServerInCell(mode="plain"))
    assert summary.completed == 2 and [(c.arm, c.concurrency) for c, _ in summary.faults] == [
        ("served", 1),
        ("served", 2),
    ]
    first, second = (why for _, why in summary.faults)
    assert first.startswith("mlx-lm-server at http://127.0.0.1:") and "exited with code -9" in first
    assert second.endswith("is not running (the server the runner started exited with code -9)")
    assert not server_pids()
    again = run_experiment(exp, db, Progress(mode="plain"))
    assert (again.skipped, again.completed, again.faults) == (2, 2, [])
    assert query(db, "SELECT arm, status, count(*) FROM runs GROUP BY ALL ORDER BY ALL") == [
        ("ours", "complete", 2),
        ("served", "complete", 2),
        ("served", "failed", 2),
    ]
    assert not server_pids()


def test_an_interrupted_run_leaves_no_server_behind(tmp_path):
    decl = tmp_path / "long.toml"
    decl.write_text(
        declaration(
            """
        [arms.served]
        runtime = "mlx-lm-server"
        """,
            min_cell_seconds=600,
        )
    )
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "run",
            str(decl),
            "--db",
            str(tmp_path / "runs.duckdb"),
            "--json",
            "--no-openblas",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        for line in run.stderr:  # wait until the cell runs, its server serving it
            if '"cell_started"' in line:
                break
        assert server_pids()
        run.send_signal(signal.SIGTERM)
        rest = run.communicate(timeout=60)[1]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130 and "Traceback" not in rest
    assert not server_pids()
