"""Running an experiment's cells on the engine and handing their raw rows to the store.

Cells are arm x concurrency x round, ordered round -> concurrency -> arm so that the
arms interleave (A B A B) and machine drift hits them alike. A cell at concurrency c is
c closed-loop clients: each sends its next prompt when its last request finishes, taking
client c's i-th prompt from the workload's unbounded seeded stream (request_id =
i * width + c, see workload.py). Cells are sized by time: a client keeps sending while it
has sent fewer than requests_per_client, or while the cell has run less than
min_cell_seconds (from its t0) or produced fewer than min_cell_tokens output tokens (of
finished requests); the requests then in flight finish and are kept. The rule is the
same for every arm, so every arm replays the same requests in the same order and a
faster arm simply replays more of the stream. Each arm has one engine, warmed up
(compilation, first touch) before its first timed cell, outside any cell's clock.
Pass and request events are buffered in memory during a cell and written between cells,
so logging does not perturb the timing; the machine's load (load.py) is sampled just
outside the cell's clock and stored with the run. Cells already complete in the
database (same experiment, declaration sha256, chip and quick flag) are skipped: this
is how a run resumes; with `remeasure` every cell runs again and its new run is appended
(pages use the newest run of a cell). A cell that raises (Ctrl-C included) is marked
failed before the error goes on.
This module does not parse declarations, render pages or print anything itself.
"""
from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from runner.engine import Engine, PassEvent
from runner.engine.checkpoint import resolve_checkpoint
from runner.store.store import Store

from . import chip, load
from .declaration import Experiment, Workload
from .estimate import cell_seconds, estimate_seconds  # noqa: F401  (estimate_seconds: the API)
from .progress import CellLabel, CellTarget, Progress
from .workload import PromptStream

WARMUP_NEW_TOKENS = 8


@dataclass(frozen=True)
class Cell:
    arm: str
    concurrency: int
    round: int


def plan_cells(exp: Experiment) -> list[Cell]:
    return [Cell(arm, c, r) for r in range(exp.rounds) for c in sorted(exp.concurrency)
            for arm in exp.arms]


class PassBuffer:
    """The engine's sink during a timed cell: keeps PassEvents in memory, nothing else."""

    def __init__(self) -> None:
        self.passes: list[PassEvent] = []

    def __call__(self, event) -> None:
        if type(event) is PassEvent:
            self.passes.append(event)


@dataclass
class CellRows:
    requests: list[dict] = field(default_factory=list)
    passes: list[dict] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return sum(r["output_tokens"] for r in self.requests)


def output_sha256(tokens) -> str:
    return hashlib.sha256(",".join(str(t) for t in tokens).encode()).hexdigest()


def request_seed(seed: int, request_id: int) -> int:
    return (seed * 1_000_003 + request_id) % (2**31)


def needs_more(w: Workload, sent: int, elapsed_ns: int, tokens: int) -> bool:
    """Whether a client that has sent `sent` requests sends another, when the cell has run
    `elapsed_ns` since its t0 and its finished requests hold `tokens` output tokens."""
    return (sent < w.requests_per_client or elapsed_ns < w.min_cell_seconds * 1e9
            or tokens < w.min_cell_tokens)


def run_cell(engine: Engine, stream: PromptStream, concurrency: int,
             exp: Experiment, progress: Progress | None = None) -> CellRows:
    """c closed-loop clients over the stream's clients 0..c-1, sized by needs_more()."""
    w = exp.workload
    buffer = PassBuffer()
    owner: dict[int, tuple[int, int]] = {}   # engine request id -> (client, request_id)
    sent = [0] * concurrency
    rows = CellRows()
    tokens = 0

    def submit(client: int) -> None:
        i = sent[client]
        sent[client] += 1
        request_id = stream.request_id(client, i)
        rid = engine.add_request(stream.prompt(client, i), w.max_new_tokens,
                                 temperature=w.temperature, seed=request_seed(exp.seed, request_id))
        owner[rid] = (client, request_id)

    engine.sink = buffer
    t0 = time.perf_counter_ns()
    try:
        for client in range(concurrency):
            submit(client)
        while engine.has_work():
            events = engine.step()
            now = time.perf_counter_ns()
            for ev in events:
                client, request_id = owner.pop(ev.request_id)
                tokens += ev.output_tokens
                if needs_more(w, sent[client], now - t0, tokens):
                    submit(client)
                rows.requests.append({
                    "request_id": request_id, "client": client,
                    "prompt_tokens": ev.prompt_tokens, "output_tokens": ev.output_tokens,
                    "cached_tokens": ev.cached_tokens, "arrival_ns": ev.arrival_ns - t0,
                    "first_token_ns": ev.first_token_ns - t0, "done_ns": ev.done_ns - t0,
                    "output_sha256": output_sha256(ev.tokens)})
                if progress:
                    progress.update(len(rows.requests), tokens)
    finally:
        engine.sink = None
    rows.passes = [{
        "pass_index": p.pass_index, "start_ns": p.start_ns - t0, "duration_ns": p.duration_ns,
        "kind": p.kind, "width": p.width, "prefill_tokens": p.prefill_tokens,
        "decode_tokens": p.decode_tokens, "drafted": p.drafted, "accepted": p.accepted,
        "emitted": p.emitted, "state_bytes": p.state_bytes,
        "max_row_state_bytes": p.max_row_state_bytes} for p in buffer.passes]
    rows.requests.sort(key=lambda r: r["request_id"])
    return rows


def warm_up(engine: Engine, exp: Experiment) -> None:
    """Compile every decode shape, then touch memory at width 1 and 2, at the workload's shortest and longest
    prompt, with random ids unrelated to the workload (so the warm-up caches no prefix of
    a timed prompt). Its events are dropped and the prefix cache is cleared afterwards."""
    rng = random.Random(exp.seed)
    vocab = engine.args.vocab_size
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in exp.workload.prompt_tokens]
    new_tokens = min(WARMUP_NEW_TOKENS, exp.workload.max_new_tokens)
    engine.sink = None
    # Trace every decode shape the workload can reach, so no timed pass pays for it.
    engine.warmup(max(exp.workload.prompt_tokens) + exp.workload.shared_prefix_tokens
                  + exp.workload.max_new_tokens)
    engine.generate(prompts[:1], max_new_tokens=new_tokens)
    engine.generate(prompts[: min(2, engine.config.max_batch_size)], max_new_tokens=new_tokens)
    engine.clear_prefix_cache()


@dataclass
class RunSummary:
    planned: int = 0
    skipped: int = 0
    completed: int = 0
    failed_cell: Cell | None = None


def run_experiment(exp: Experiment, db_path: Path, progress: Progress, *,
                   remeasure: bool = False) -> RunSummary:
    cells = plan_cells(exp)
    summary = RunSummary(planned=len(cells))
    fingerprint, code = chip.fingerprint(), chip.code_version()
    checkpoint = resolve_checkpoint(exp.model)
    with Store.open(db_path) as st:
        stale = st.fail_stale_runs()
        if stale:
            progress.note(f"marked {stale} run(s) left 'running' by a killed process as failed")
        chip_id = st.ensure_chip(fingerprint)
        done = set() if remeasure else st.complete_cells(
            experiment=exp.name, declaration_sha256=exp.sha256, chip_id=chip_id, quick=exp.quick)
        todo = [c for c in cells if (c.arm, c.concurrency, c.round) not in done]
        summary.skipped = len(cells) - len(todo)
        if summary.skipped:
            progress.note(f"{summary.skipped} of {len(cells)} cells already complete; "
                          f"running the {len(todo)} missing")
        if not todo:
            return summary
        stream = PromptStream(exp.workload, exp.seed, checkpoint, width=max(exp.concurrency))
        progress.plan([cell_seconds(exp, c.concurrency) for c in todo])
        engines: dict[str, Engine] = {}
        model_sha256 = None
        for k, cell in enumerate(todo, 1):
            if cell.arm not in engines:
                progress.note(f"loading and warming up the engine for arm {cell.arm}")
                engines[cell.arm] = Engine.from_pretrained(checkpoint, **exp.knobs(cell.arm))
                warm_up(engines[cell.arm], exp)
            engine = engines[cell.arm]
            model_sha256 = model_sha256 or engine.checkpoint_sha256()
            label = CellLabel(k, len(todo), cell.arm, cell.concurrency, cell.round)
            run_id = st.begin_run(
                experiment=exp.name, declaration_sha256=exp.sha256, arm=cell.arm,
                concurrency=cell.concurrency, round=cell.round, chip_id=chip_id,
                model_sha256=model_sha256, code_version=code, knobs=engine.config.as_dict(),
                seed=exp.seed, quick=exp.quick)
            # Each cell starts with a cold prefix cache: otherwise a later cell would reuse the
            # prompts an earlier cell (same prompts, other concurrency or round) left behind.
            engine.clear_prefix_cache()
            w = exp.workload
            target = CellTarget(cell.concurrency * w.requests_per_client, w.min_cell_seconds,
                                w.min_cell_tokens, progress.estimates[k - 1])
            progress.cell_started(label, target)
            before = load.sample()
            t = time.perf_counter()
            try:
                rows = run_cell(engine, stream, cell.concurrency, exp, progress)
            except BaseException:
                st.finish_run(run_id, "failed", load=load.figures(before, load.sample()))
                summary.failed_cell = cell
                progress.cell_finished(label, "failed", 0, time.perf_counter() - t)
                raise
            seconds = time.perf_counter() - t
            figures = load.figures(before, load.sample())
            with st.transaction():
                st.append_requests(run_id, rows.requests)
                st.append_passes(run_id, rows.passes)
                st.finish_run(run_id, "complete", load=figures)
            summary.completed += 1
            progress.cell_finished(label, "complete", rows.output_tokens, seconds,
                                   requests=len(rows.requests))
    return summary
