"""Bounded memory over a run: what the runner holds after each cell does not grow with the
number of cells (objects counted, never RSS: RSS on a shared machine says little)."""

from __future__ import annotations

import gc
from collections import Counter

from runner.experiments.declaration import load
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress
from runner.train.random_init import write_random_checkpoint

# The per-cell buffers of a run (pass events, request events, finished requests, cell rows)
# and the engine's per-request state (sequences) and MLX arrays held from Python.
HELD = ("PassEvent", "RequestEvent", "Finished", "CellRows", "Sequence", "array", "dict", "list")


DECLARATION = """\
title = "many tiny cells"
model = "{model}"
seed = 1
rounds = 6
concurrency = [1, 2]

[workload]
prompts = "heldout"
requests_per_client = 2
prompt_tokens = [8, 40]
max_new_tokens = 6
min_cell_seconds = 0

[engine]
max_batch_size = 2
prefill_chunk = 16

[arms.off]
mtp = false

[arms.on]
mtp = true
"""


class Counting(Progress):
    def __init__(self):
        super().__init__(mode="plain")
        self.held: list[Counter] = []

    def cell_finished(self, cell, status, *args, **kwargs):
        super().cell_finished(cell, status, *args, **kwargs)
        gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.get_objects())
        self.held.append(Counter({k: kinds[k] for k in HELD}))


def test_objects_held_after_each_cell_do_not_grow_with_the_number_of_cells(tmp_path):
    model = write_random_checkpoint(tmp_path / "model", seed=1)
    decl = tmp_path / "many.toml"
    decl.write_text(DECLARATION.format(model=model))
    progress = Counting()
    gc.collect()
    before = Counter(type(o).__name__ for o in gc.get_objects())  # what other tests left alive
    summary = run_experiment(load(decl), tmp_path / "runs.duckdb", progress)
    assert summary.completed == 24 and len(progress.held) == 24
    for k in ("PassEvent", "RequestEvent", "Finished", "Sequence"):  # none outlives its cell
        assert all(h[k] <= before[k] for h in progress.held), (k, before[k], [h[k] for h in progress.held])
    # Once both arms' engines are up (cell 2), each later cell holds what cell 4 held, up to
    # the last cell of an arm, whose engine is stopped then (fewer objects, never more).
    steady = progress.held[3]
    for i, h in enumerate(progress.held[3:], 4):
        grew = {k: (steady[k], h[k]) for k in HELD if h[k] > steady[k]}
        assert not grew, f"cell {i} holds more than cell 4: {grew}"


class Noting(Progress):
    def __init__(self):
        super().__init__(mode="plain")
        self.notes: list[str] = []

    def note(self, text: str, **fields) -> None:
        super().note(text, **fields)
        self.notes.append(text)


def test_over_the_memory_budget_idle_engines_are_released_and_restarted_and_every_cell_completes(tmp_path):
    model = write_random_checkpoint(tmp_path / "model", seed=1)
    decl = tmp_path / "tight.toml"
    decl.write_text(
        DECLARATION.format(model=model)
        .replace("rounds = 6", "rounds = 2")
        .replace("[1, 2]", "[1]")
        .replace("max_batch_size = 2", "max_batch_size = 1")
    )
    progress = Noting()
    summary = run_experiment(load(decl), tmp_path / "runs.duckdb", progress, memory_budget_mb=1)
    assert summary.completed == 4
    loads = [n for n in progress.notes if n.startswith("loading and warming up")]
    released = [n for n in progress.notes if "over the budget of 1 MB: released the engine(s) of arm(s)" in n]
    # Counterbalanced order: off, on | on, off. A cell whose arm differs from the last one's
    # starts its engine again (off was released before on ran); after its last cell an arm
    # is stopped, not released.
    assert [n.rsplit(" ", 1)[1] for n in loads] == ["off", "on", "off"] and len(released) == 1
