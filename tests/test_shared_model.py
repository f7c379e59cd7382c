"""Arms on one model share it and its compiled functions (engine/shelf.py), which bounds a
run's resident memory: most of an MTP engine's memory is its compiled graphs, one per
traced decode shape (issue 22). No timing is asserted; memory is, with a margin."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

from runner.engine import Engine
from runner.engine.shelf import Shelf

PROMPTS = [[5, 17, 301, 44, 9, 12], [7, 8, 9]]


def test_engines_on_one_shelf_share_the_model_and_its_compiled_functions():
    shelf = Shelf()
    knobs = dict(max_batch_size=2, mtp=True, index_topk=64)
    first = Engine.from_pretrained("tiny", shelf=shelf, draft_policy="always", **knobs)
    assert first.warmup(40) > 0
    traced = dict(first.forward._compiled)
    second = Engine.from_pretrained("tiny", shelf=shelf, draft_policy="solo", **knobs)
    assert second.model is first.model and second.forward._compiled is first.forward._compiled
    second.warmup(40)
    assert dict(second.forward._compiled) == traced  # nothing traced twice
    # Other knobs that change the graph (no indexer) get functions of their own, never these.
    other = Engine.from_pretrained("tiny", shelf=shelf, max_batch_size=2, mtp=True, index_topk=0)
    assert other.model is not first.model and len(shelf) == 2
    # Shared functions compute what a private engine computes; the engines keep their own pools.
    private = Engine.from_pretrained("tiny", draft_policy="always", **knobs)
    expected = private.generate(PROMPTS, max_new_tokens=20)
    assert first.generate(PROMPTS, max_new_tokens=20) == expected
    assert second.generate(PROMPTS, max_new_tokens=20) == expected
    del first, second, traced, private
    gc.collect()
    assert len(shelf) == 1  # held weakly: gone with the last engine using it


# The shape of spec-decode-batching-deep on tiny: six arms (the A/A copy of off included),
# four of them with the MTP head, three of those with the same model (indexer on), so the
# fifth and sixth arms start after the fourth cell.
DECLARATION = """\
title = "six arms on one model"
model = "tiny"
seed = 1
rounds = 1
concurrency = [1, 2]

[workload]
prompts = "heldout"
requests_per_client = 1
prompt_tokens = [16, 48]
max_new_tokens = 16
min_cell_seconds = 0
min_cell_tokens = 0
aa = true

[engine]
max_batch_size = 2

[arms.off]
mtp = false
index_topk = 0

[arms.mtp-solo]
mtp = true
draft_policy = "solo"
index_topk = 0

[arms.on]
mtp = true
draft_policy = "solo"
index_topk = 64

[arms.always]
mtp = true
draft_policy = "always"
index_topk = 64

[arms.adaptive]
mtp = true
draft_policy = "adaptive"
mtp_sync = "lazy"
index_topk = 64
"""


def _resident_mb(pid: int) -> float:
    return (
        int(subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True).stdout)
        / 1024
    )


def test_a_runs_resident_memory_stays_within_ten_percent_after_its_fourth_cell(tmp_path):
    """A real `runner run` in a child process (its memory is the run's alone), its resident
    memory read after each cell. Before arms shared their model, the fifth and sixth arms'
    engines added their own compiled graphs: 600 MB after cell 7 against 490 MB after
    cell 4 (+22%); shared, 419 against 408 (+3%), on a shared 2-core machine."""
    decl = tmp_path / "six.toml"
    decl.write_text(DECLARATION)
    child = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "run", str(decl), "--json", "--no-openblas"]
        + ["--db", str(tmp_path / "runs.duckdb")],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    after_cell: list[tuple[str, float]] = []
    for line in child.stderr:
        if line.startswith("{") and json.loads(line).get("event") == "cell_finished":
            after_cell.append((json.loads(line)["arm"], _resident_mb(child.pid)))
    assert child.wait() == 0
    assert len(after_cell) == 12
    # An arm's engine is stopped after its last cell (the last cells hold less).
    assert {arm for arm, _ in after_cell[:6]} == {"off", "off-aa", "mtp-solo", "on", "always", "adaptive"}
    fourth = after_cell[3][1]
    worst = max(mb for _, mb in after_cell[4:])
    assert worst <= 1.10 * fourth, f"resident memory after each cell (MB): {after_cell}"
