"""`runner run` end to end: a real random checkpoint, the real engine, a real DuckDB file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from runner.cli import main as cli
from runner.engine import EngineConfig
from runner.experiments.declaration import load
from runner.experiments.execute import plan_cells, run_experiment
from runner.experiments.progress import Progress
from runner.store.cell import CellRecord
from runner.store.store import Store
from runner.train.random_init import write_random_checkpoint

REPO = Path(__file__).resolve().parents[1]


def declaration(model: Path, title: str = "e2e") -> str:
    return textwrap.dedent(f"""\
        title = "{title}"
        model = "{model}"
        seed = 11
        rounds = 2
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        requests_per_client = 2
        prompt_tokens = [8, 20]
        max_new_tokens = 6
        shared_prefix_tokens = 4
        min_cell_seconds = 0          # these tests count requests: sized by requests only

        [engine]
        max_batch_size = 2
        prefill_chunk = 16

        [arms.off]
        mtp = false

        [arms.on]
        mtp = true
        """)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    model = write_random_checkpoint(root / "model", seed=0)
    decl = root / "e2e.toml"
    decl.write_text(declaration(model))
    db = root / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--json"]) == 0
    return root, model, decl, db


def query(db: Path, sql: str, params=()):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def test_every_cell_is_a_complete_run_in_interleaved_order(setup):
    _, model, decl, db = setup
    runs = query(
        db,
        "SELECT arm, concurrency, round, status, quick, declaration_sha256, knobs, seed "
        "FROM runs ORDER BY started_at",
    )
    assert [r[:3] for r in runs] == [  # counterbalanced: A B, then B A
        ("off", 1, 0),
        ("on", 1, 0),
        ("on", 2, 0),
        ("off", 2, 0),
        ("on", 1, 1),
        ("off", 1, 1),
        ("off", 2, 1),
        ("on", 2, 1),
    ]
    assert {(r[3], r[4], r[5], r[7]) for r in runs} == {
        ("complete", False, hashlib.sha256(decl.read_bytes()).hexdigest(), 11)
    }
    on_knobs = json.loads(runs[1][6])
    assert on_knobs == EngineConfig.from_kwargs(max_batch_size=2, prefill_chunk=16, mtp=True).as_dict()


def test_exact_row_accounting_per_run(setup):
    _, _, _, db = setup
    rows = query(
        db,
        """
        SELECT r.concurrency, q.n, q.output_tokens, p.emitted, p.first_index
        FROM runs r
        JOIN (SELECT run_id, count(*) n, sum(output_tokens) output_tokens
              FROM requests GROUP BY 1) q USING (run_id)
        JOIN (SELECT run_id, sum(emitted) emitted, min(pass_index) first_index
              FROM passes GROUP BY 1) p USING (run_id)""",
    )
    assert len(rows) == 8
    for concurrency, n, output_tokens, emitted, first_index in rows:
        assert n == concurrency * 2  # c clients x requests_per_client
        assert emitted == output_tokens  # passes' emitted tokens = requests' output tokens
        assert 0 < output_tokens <= n * 6
        assert first_index > 0  # the warm-up's passes are not in the timed rows
    bad_times = query(
        db,
        "SELECT count(*) FROM requests WHERE arrival_ns < 0 OR first_token_ns < arrival_ns "
        "OR done_ns < first_token_ns",
    )
    assert bad_times == [(0,)]


def test_every_run_records_the_machine_load(setup):
    _, _, _, db = setup
    load = query(db, "SELECT loadavg_start, loadavg_end, steal_fraction, busy_fraction_other FROM runs")
    assert len(load) == 8
    for start, end, steal, other in load:
        if sys.platform.startswith("linux"):
            assert start is not None and end is not None and start >= 0 and end >= 0
            assert other is not None and 0 <= other <= 1
        if steal is not None:
            assert 0 <= steal <= 1


def test_every_arm_and_level_gets_the_same_prompts(setup):
    _, _, _, db = setup
    per_request = query(
        db, "SELECT request_id, count(DISTINCT prompt_tokens), count(*) FROM requests GROUP BY 1"
    )
    # request_id = i * 2 + client: 0, 2 (client 0) run in all 8 cells; 1, 3 (client 1) in the
    # 4 concurrency-2 cells
    assert sorted(per_request) == [(0, 1, 8), (1, 1, 4), (2, 1, 8), (3, 1, 4)]
    # greedy MTP must not change the tokens: one output hash per request across both arms
    assert query(
        db, "SELECT max(k) FROM (SELECT count(DISTINCT output_sha256) k FROM requests GROUP BY request_id)"
    ) == [(1,)]


def test_rerun_skips_complete_cells_and_export_import_is_idempotent(setup, tmp_path, capsys):
    _, _, decl, db = setup
    assert cli(["run", str(decl), "--db", str(db)]) == 0
    assert query(db, "SELECT count(*) FROM runs") == [(8,)]
    assert cli(["export", "e2e", "--db", str(db), "--out", str(tmp_path / "x")]) == 0
    other = tmp_path / "other.duckdb"
    assert cli(["import", str(tmp_path / "x"), "--db", str(other)]) == 0
    assert cli(["import", str(tmp_path / "x"), "--db", str(other)]) == 0
    out = capsys.readouterr().out
    assert "added 1 chips, 8 runs" in out and "added 0 chips, 0 runs, 0 requests, 0 passes" in out
    for table in ("runs", "requests", "passes"):
        assert query(other, f"SELECT count(*) FROM {table}") == query(db, f"SELECT count(*) FROM {table}")


class InterruptInCell(Progress):
    """Ctrl-C arriving while the third cell is running (after its first request)."""

    def update(self, requests_done, tokens):
        if self._cell.index == 3:
            raise KeyboardInterrupt


def test_resume_after_interruption_runs_only_missing_cells(tmp_path):
    model = write_random_checkpoint(tmp_path / "model", seed=2)
    decl = tmp_path / "resume.toml"
    decl.write_text(declaration(model).replace("rounds = 2", "rounds = 1"))
    exp, db = load(decl).shrunk(), tmp_path / "runs.duckdb"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, db, InterruptInCell(mode="plain"))
    assert query(db, "SELECT arm, concurrency, status FROM runs ORDER BY started_at") == [
        ("off", 1, "complete"),
        ("on", 1, "complete"),
        ("on", 2, "failed"),  # counterbalanced: at concurrency 2, on goes first
    ]
    with Store.open(db) as st:  # what a SIGKILLed process leaves behind: a 'running' row
        chip_id = query_chip(st)
        st.begin_run(
            CellRecord(
                experiment="resume",
                declaration_sha256=exp.sha256,
                arm="on",
                concurrency=2,
                round=0,
                seed=11,
                quick=True,
            ),
            chip_id=chip_id,
            model_sha256="m",
            code_version="c",
            knobs={},
        )
    summary = run_experiment(exp, db, Progress(mode="plain"))
    assert (summary.planned, summary.skipped, summary.completed) == (4, 2, 2)
    assert query(db, "SELECT status, quick, count(*) FROM runs GROUP BY 1, 2 ORDER BY 1") == [
        ("complete", True, 4),
        ("failed", True, 2),
    ]
    cells = query(db, "SELECT arm, concurrency FROM runs WHERE status = 'complete' ORDER BY started_at")
    assert cells == [(c.arm, c.concurrency) for c in plan_cells(exp)]
    assert query(db, "SELECT max(output_tokens) FROM requests") <= [(16,)]
    # a changed declaration is new cells
    decl.write_text(declaration(model, title="changed").replace("rounds = 2", "rounds = 1"))
    assert run_experiment(load(decl).shrunk(), db, Progress(mode="plain")).completed == 4


def query_chip(st: Store) -> str:
    return st.con.execute("SELECT chip_id FROM chips").fetchall()[0][0]


def test_locked_database_is_a_clear_error_from_the_cli(setup, tmp_path):
    _, _, decl, _ = setup
    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys\nfrom runner.store.store import Store\n"
            f"st = Store.open({str(db)!r})\nprint('ready', flush=True)\nsys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        done = subprocess.run(
            [sys.executable, "-m", "runner.cli", "run", str(decl), "--db", str(db)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
    finally:
        holder.communicate("\n", timeout=30)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"database {db.resolve()} is locked by PID {holder.pid}" in done.stderr
