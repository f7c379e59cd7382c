"""Builds plausible bothrows databases for the generator's tests, through the Store API.

Two chips, arms off/on, concurrencies 1, 2, 4 and two rounds by default; MTP ("on")
speeds decode up by about 25% alone and slows it at the ceiling, and drafts less often as
the batch widens. Everything is seeded: the same arguments give the same rows (run ids
are the store's uuids and so differ between builds). This is test data, not a model of
any real chip.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from runner.store.cell import CellRecord
from runner.store.store import Store

EXPERIMENT = "spec-fixture"
DECLARATION = "d" * 64
MODEL = "m" * 64
POST_DAY = datetime(2026, 11, 20)  # fixture runs start the day before this
ON_FACTOR = {1: 1.25, 2: 1.05, 4: 0.90}  # decode speed of "on" relative to "off"
DRAFT_SHARE = {1: 1.0, 2: 0.5, 4: 0.2}  # how often "on" drafts at each width


@dataclass(frozen=True)
class FixtureChip:
    name: str
    solo_decode_tps: float
    blas: str = "accelerate"
    declared: bool = True  # its machine class is declared as its name (False: computed)

    def machine_class(self) -> str | None:
        """The class `runner run --machine-class` would declare: the name, so pages label
        the fixture's chips as the tests name them; None: computed ("Same EPYC, 10 cores, GPU")."""
        return self.name if self.declared else None

    def fingerprint(self) -> dict:
        return {
            "name": self.name,
            "device": "gpu",
            "cores": 10,
            "memory_bytes": 32 << 30,
            "os": "macOS 15",
            "mlx_version": "0.29.0",
            "blas": self.blas,
            "python": "3.12.0",
        }


DEFAULT_CHIPS = (FixtureChip("Fixture M1", 100.0), FixtureChip("Fixture M3", 160.0))


@dataclass
class Fixture:
    path: Path
    experiment: str
    chip_ids: dict[str, str] = field(default_factory=dict)  # name -> chip_id
    pass_rows: int = 0


def _run_rows(
    rng: random.Random,
    chip: FixtureChip,
    arm: str,
    concurrency: int,
    requests_per_client: int,
    passes: int,
    factors: dict | None = None,
    run_noise: float = 0.01,
    request_noise: float = 0.0,
) -> tuple[list[dict], list[dict]]:
    """factors: arm -> decode speed factor (default: ON_FACTOR for every arm but "off");
    run_noise / request_noise: uniform relative noise per run / per request."""
    noise = lambda: 1.0 + rng.uniform(-run_noise, run_noise)  # noqa: E731
    decode_tps = chip.solo_decode_tps / (1 + 0.15 * (concurrency - 1)) * noise()
    if factors is not None:
        decode_tps *= factors.get(arm, 1.0)
    elif arm != "off":
        decode_tps *= ON_FACTOR.get(concurrency, 0.9)
    prefill_tps = 8 * chip.solo_decode_tps * noise()
    requests, rid = [], 0
    for client in range(concurrency):
        t = 0
        for _ in range(requests_per_client):
            prompt, out = 64, 32
            speed = decode_tps * (1.0 + rng.uniform(-request_noise, request_noise) if request_noise else 1.0)
            first = t + int(prompt / prefill_tps * 1e9)
            done = first + int((out - 1) / speed * 1e9)
            requests.append(
                {
                    "request_id": rid,
                    "client": client,
                    "prompt_tokens": prompt,
                    "output_tokens": out,
                    "cached_tokens": 0,
                    "arrival_ns": t,
                    "first_token_ns": first,
                    "done_ns": done,
                    "output_sha256": f"{rid:064x}",
                }
            )
            rid, t = rid + 1, done
    share = DRAFT_SHARE.get(concurrency, 0.2) if arm != "off" else 0.0
    step_ns = int(1e9 / decode_tps)
    rows = []
    for i in range(passes):
        width = concurrency if i >= concurrency else i + 1
        drafted = width if rng.random() < share else 0
        accepted = sum(rng.random() < 0.75 for _ in range(drafted))
        rows.append(
            {
                "pass_index": i,
                "start_ns": i * step_ns,
                "duration_ns": step_ns,
                "kind": "prefill" if i == 0 else "decode",
                "width": width,
                "prefill_tokens": 64 if i == 0 else 0,
                "decode_tokens": width + drafted,
                "drafted": drafted,
                "accepted": accepted,
                "emitted": width + accepted,
                "state_bytes": width * 2_000_000 + i,
                "max_row_state_bytes": 2_100_000,
            }
        )
    return requests, rows


def token_times(requests: list[dict]) -> dict[int, list[int]]:
    """Each request's output tokens evenly spaced from its first token to its last."""
    out = {}
    for q in requests:
        n, a, b = q["output_tokens"], q["first_token_ns"], q["done_ns"]
        out[q["request_id"]] = [a + (b - a) * i // max(n - 1, 1) for i in range(n)]
    return out


def _of_round(factors: dict | None, r: int) -> dict | None:
    """An arm's factor may be a tuple: one factor a round."""
    return None if factors is None else {a: f[r] if isinstance(f, tuple) else f for a, f in factors.items()}


def build_fixture(
    path: str | Path,
    *,
    experiment: str = EXPERIMENT,
    chips: tuple[FixtureChip, ...] = DEFAULT_CHIPS,
    arms: tuple[str, ...] = ("off", "on"),
    concurrencies: tuple[int, ...] = (1, 2, 4),
    rounds: int = 2,
    passes_per_run: int = 40,
    requests_per_client: int = 2,
    skip: set[tuple[str, str, int]] = frozenset(),
    fail: set = frozenset(),
    quick: bool = False,
    day: datetime = datetime(2026, 11, 19),
    seed: int = 0,
    factors: dict | None = None,
    run_noise: float = 0.01,
    request_noise: float = 0.0,
    code_version: str = "abc1234",
    knobs: dict[str, dict] | None = None,
    add: bool = False,
) -> Fixture:
    """Write every (chip, arm, concurrency, round) cell; `skip` leaves (chip name, arm,
    concurrency) cells out entirely, `fail` records them as failed runs; `knobs`: arm ->
    its knobs (default: each arm's own draft policy, so no two arms are identical).
    `add`: write into an existing database (else one there is an error: a second fixture's
    runs, started at the same times, would tie with the first's as each cell's newest)."""
    if Path(path).exists() and not add:
        raise FileExistsError(f"{path}: a database is there already; build_fixture(add=True) adds to it")
    rng = random.Random(seed)
    fx = Fixture(Path(path), experiment)
    with Store.open(path) as st:
        for chip in chips:
            chip_id = st.ensure_chip(chip.fingerprint(), chip.machine_class())
            fx.chip_ids[chip.name] = chip_id
            for arm in arms:
                for c in concurrencies:
                    if (chip.name, arm, c) in skip:
                        continue
                    for r in range(rounds):
                        reqs, passes = _run_rows(
                            rng,
                            chip,
                            arm,
                            c,
                            requests_per_client,
                            passes_per_run,
                            _of_round(factors, r),
                            run_noise,
                            request_noise,
                        )
                        run = st.begin_run(
                            CellRecord(
                                experiment=experiment,
                                declaration_sha256=DECLARATION,
                                arm=arm,
                                concurrency=c,
                                round=r,
                                seed=seed,
                                quick=quick,
                            ),
                            chip_id=chip_id,
                            model_sha256=MODEL,
                            code_version=code_version,
                            knobs=(knobs or {}).get(arm, {"draft_policy": arm}),
                            started_at=day.replace(hour=8, minute=r),
                        )
                        st.append_requests(run, reqs)
                        st.append_passes(run, passes)
                        st.append_tokens(run, token_times(reqs))
                        fx.pass_rows += len(passes)
                        st.finish_run(
                            run,
                            "failed" if (chip.name, arm, c) in fail else "complete",
                            finished_at=day.replace(hour=9),
                        )
    return fx


def remeasure(
    path: str | Path,
    chip: FixtureChip,
    arm: str,
    concurrency: int,
    *,
    experiment: str = EXPERIMENT,
    speedup: float,
    day: datetime,
    rounds: int = 2,
    seed: int = 1,
    hour: int = 8,
) -> list[str]:
    """Append a re-measurement of one cell (all rounds) whose decode speed is scaled by
    `speedup`, started at `hour` of `day`; returns the new run ids."""
    rng = random.Random(seed)
    scaled = FixtureChip(chip.name, chip.solo_decode_tps, chip.blas, chip.declared)
    run_ids = []
    with Store.open(path) as st:
        chip_id = st.ensure_chip(chip.fingerprint(), chip.machine_class())
        for r in range(rounds):
            reqs, passes = _run_rows(rng, scaled, arm, concurrency, 2, 40)
            for q in reqs:  # stretch decode time by 1/speedup
                q["done_ns"] = q["first_token_ns"] + int((q["done_ns"] - q["first_token_ns"]) / speedup)
            run = st.begin_run(
                CellRecord(
                    experiment=experiment,
                    declaration_sha256=DECLARATION,
                    arm=arm,
                    concurrency=concurrency,
                    round=r,
                    seed=seed,
                    quick=False,
                ),
                chip_id=chip_id,
                model_sha256=MODEL,
                code_version="def5678",
                knobs={"draft_policy": arm},
                started_at=day.replace(hour=hour, minute=r),
            )
            st.append_requests(run, reqs)
            st.append_passes(run, passes)
            st.append_tokens(run, token_times(reqs))
            st.finish_run(run, "complete", finished_at=day.replace(hour=hour + 1))
            run_ids.append(run)
    return run_ids


@contextmanager
def edited_fixture(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """The fixture built at `path` and migrated by the store, and a connection for a test
    to write its own rows into it directly (closed on leaving)."""
    build_fixture(path)
    with Store.open(path):
        pass
    con = duckdb.connect(str(path))
    try:
        yield con
    finally:
        con.close()


def complete_runs(path: str | Path) -> set[str]:
    """The run ids of the database's complete runs (what a measurement folder is written from)."""
    with Store.open(path) as st:
        return {r[0] for r in st.con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()}
