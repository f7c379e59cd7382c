"""The contention rule, run for real: with two busy loops taking the cores, every cell is
contended past its 15% limit, is measured again in its slot twice and then kept (flagged,
with its count); with `contention_limit = "off"` nothing is measured again. The rule's
own arithmetic is checked on figures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from runner.cli import main as cli
from runner.experiments import load
from runner.train.random_init import write_random_checkpoint

HOG = "import time\nt = time.time() + 600\nwhile time.time() < t:\n    pass\n"


def declaration(model: Path, limit: str) -> str:
    return textwrap.dedent(f"""\
        title = "contended"
        model = "{model}"
        seed = 3
        rounds = 1
        concurrency = [1]
        contention_limit = "{limit}"

        [workload]
        prompts = "heldout"
        requests_per_client = 2
        prompt_tokens = [8, 16]
        max_new_tokens = 16
        min_cell_seconds = 0.3

        [engine]
        max_batch_size = 1

        [arms.a]
        mtp = false
        """)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("contended") / "model", seed=1)


def _run(tmp_path: Path, model: Path, limit: str, monkeypatch) -> list[tuple]:
    monkeypatch.delenv(load.RULE_ENV, raising=False)  # the suite turns the rule off; this test is the rule
    decl = tmp_path / "c.toml"
    decl.write_text(declaration(model, limit))
    db = tmp_path / "runs.duckdb"
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        assert cli(["run", str(decl), "--db", str(db), "--no-openblas"]) == 0
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT status, contention_reruns, busy_fraction_other FROM runs ORDER BY started_at"
        ).fetchall()
    finally:
        con.close()


def test_a_contended_cell_is_measured_again_twice_then_kept_with_its_count(tmp_path, model, monkeypatch):
    runs = _run(tmp_path, model, "15%", monkeypatch)
    assert [(s, n) for s, n, _ in runs] == [("contended", None), ("contended", None), ("complete", 2)]
    assert all(other > 0.15 for _, _, other in runs)


def test_with_the_rule_off_a_contended_cell_is_kept_at_once(tmp_path, model, monkeypatch):
    runs = _run(tmp_path, model, "off", monkeypatch)
    assert [(s, n) for s, n, _ in runs] == [("complete", None)]


def test_the_rule_reads_steal_then_other_processes_and_says_which():
    assert load.contended({"steal_fraction": 0.2, "busy_fraction_other": 0.5}, 0.15).startswith(
        "the hypervisor"
    )
    assert load.contended({"steal_fraction": 0.0, "busy_fraction_other": 0.5}, 0.15).startswith(
        "other processes"
    )
    assert load.contended({"steal_fraction": 0.1, "busy_fraction_other": 0.1}, 0.15) is None
    assert load.contended({"steal_fraction": None, "busy_fraction_other": None}, 0.15) is None
