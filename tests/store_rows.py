"""Rows for the store's tests: a chip, a run's requests, token times and passes, and a run
added whole."""

from __future__ import annotations

from runner.store.cell import CellRecord
from runner.store.store import Store

CHIP = {
    "name": "Test CPU",
    "device": "cpu",
    "cores": 2,
    "memory_bytes": 2**30,
    "os": "Linux-test",
    "mlx_version": "0.0",
    "blas": "libblas.so.3",
    "python": "3.11",
}


def request_rows(n: int) -> list[dict]:
    return [
        {
            "request_id": i,
            "client": i % 2,
            "prompt_tokens": 10 + i,
            "output_tokens": 4,
            "cached_tokens": 0,
            "arrival_ns": 100 * i,
            "first_token_ns": 100 * i + 50,
            "done_ns": 100 * i + 90,
            "output_sha256": f"{i:064x}",
        }
        for i in range(n)
    ]


def token_times(n: int) -> dict[int, tuple[int, ...]]:
    """Each request_rows request's 4 output tokens: the first at first_token_ns, the last at done_ns."""
    return {i: (100 * i + 50, 100 * i + 60, 100 * i + 75, 100 * i + 90) for i in range(n)}


def pass_rows(n: int) -> list[dict]:
    return [
        {
            "pass_index": i,
            "start_ns": 10 * i,
            "duration_ns": 9,
            "kind": "decode",
            "width": 2,
            "prefill_tokens": 0,
            "decode_tokens": 2,
            "drafted": 0,
            "accepted": 0,
            "emitted": 2,
            "state_bytes": 1000 + i,
            "max_row_state_bytes": 500 + i,
        }
        for i in range(n)
    ]


def add_run(
    st: Store,
    experiment="exp",
    arm="a",
    concurrency=1,
    round=0,
    status="complete",
    n_requests=3,
    n_passes=5,
    chip=CHIP,
) -> str:
    chip_id = st.ensure_chip(chip)
    run_id = st.begin_run(
        CellRecord(
            experiment=experiment,
            declaration_sha256="d" * 64,
            arm=arm,
            concurrency=concurrency,
            round=round,
            seed=7,
            quick=False,
        ),
        chip_id=chip_id,
        model_sha256="m" * 64,
        code_version="abc",
        knobs={"mtp": False},
    )
    st.append_requests(run_id, request_rows(n_requests))
    st.append_tokens(run_id, token_times(n_requests))
    st.append_passes(run_id, pass_rows(n_passes))
    if status != "running":
        st.finish_run(run_id, status)
    return run_id


def counts(st: Store) -> dict[str, int]:
    return {
        t: st.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
        for t in ("chips", "runs", "requests", "passes", "tokens")
    }
