"""Open-loop arrivals on every kind of runtime the executor drives: an `openai` arm against
an mlx_lm.server started for this file (conftest's `server` fixture), mlx-lm in-process and our
engine, in one `runner run` each for a script and a Poisson process. Their requests
arrive at the schedule's times, and every request's per-token times are stored, one row
per output token (the servers' and mlx-lm's own stamps: these runtimes have them whether
or not our engine does yet)."""

from __future__ import annotations

import itertools
import textwrap

import duckdb
import pytest

from runner.cli import main as cli
from runner.engine import RequestEvent
from runner.experiments.workloads.arrivals import poisson_gaps

SEED, RATE = 9, 100.0
FORMS = {
    "script": """
        arrivals = "script"
        max_new_tokens = 4

        [[workload.script]]
        at = 0.0
        prompt_tokens = 10
        label = "a"

        [[workload.script]]
        at = 0.0
        prompt_tokens = 12
        lane = 1

        [[workload.script]]
        at = 0.0
        prompt_tokens = 9
        lane = 1

        [[workload.script]]
        at = 0.2
        prompt_tokens = 40
        label = "late"
        """,
    "poisson": f"""
        prompt_tokens = [8, 16]
        max_new_tokens = 4
        requests_per_client = 2
        arrivals = {{ process = "poisson", rate = {RATE} }}
        """,
}


def declaration(form: str, base_url: str) -> str:
    return (
        textwrap.dedent(f"""\
        title = "open loop runtimes"
        model = "tiny"
        seed = {SEED}
        rounds = 1
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        min_cell_seconds = 0
        """)
        + textwrap.dedent(FORMS[form])
        + textwrap.dedent(f"""
        [engine]
        max_batch_size = 2

        [arms.remote]
        runtime = "openai"
        base_url = "{base_url}"

        [arms.mlx]
        runtime = "mlx-lm"

        [arms.ours]
        compile = false
        """)
    )


def expected_arrivals(form: str, c: int, rows: list[tuple]) -> list[tuple[int, int]]:
    """(request_id, arrival_ns) the schedule gives: one play of the script, or 2c arrivals."""
    if form == "poisson":
        times = [0] + list(itertools.accumulate(itertools.islice(poisson_gaps(SEED, RATE), 2 * c - 1)))
        return list(enumerate(times))
    return [(0, 0)] + ([(1, 0), (2, 0)] if c == 2 else []) + [(3, 200_000_000)]


@pytest.mark.parametrize("form", ["script", "poisson"])
def test_open_loop_arrivals_and_token_rows_on_every_runtime(server, tmp_path, form):
    decl = tmp_path / f"{form}.toml"
    decl.write_text(declaration(form, server[0]))
    db = tmp_path / "runs.duckdb"
    assert cli(["run", str(decl), "--db", str(db), "--json", "--no-openblas"]) == 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        requests = con.execute(
            "SELECT r.arm, r.concurrency, q.request_id, q.arrival_ns, q.first_token_ns, q.label, "
            "q.output_tokens, (SELECT count(*) FROM tokens k WHERE k.run_id = q.run_id AND "
            "k.request_id = q.request_id) FROM runs r JOIN requests q USING (run_id) "
            "WHERE r.status = 'complete' ORDER BY 1, 2, 3"
        ).fetchall()
    finally:
        con.close()
    timed = {"mlx", "ours"} if "token_ns" in RequestEvent.__dataclass_fields__ else {"mlx"}
    for arm in ("remote", "mlx", "ours"):
        for c in (1, 2):
            rows = [r for r in requests if r[:2] == (arm, c)]
            assert [(r[2], r[3]) for r in rows] == expected_arrivals(form, c, rows), (arm, c)
            assert all(r[4] > r[3] for r in rows)  # a first token after arriving
            if form == "script":
                assert [r[5] for r in rows] == ["a"] + [None] * (2 if c == 2 else 0) + ["late"]
            for *_, out, n in rows:
                # A server's stream times every token unless a token sent no text chunk: then
                # that request has no rows rather than guessed ones (runtimes/openai.py).
                assert n in ((out,) if arm in timed else (0, out) if arm == "remote" else (0,))
    assert any(r[0] == "remote" and r[-1] > 0 for r in requests)
