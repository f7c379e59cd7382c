"""A cell as the store records it.

- `CellRecord` is one cell of an experiment: its key (arm, concurrency, round, and the
  offered rate in a rate sweep) and what
  its run row holds about it from the declaration (experiment, declaration hash, seed,
  quick, runtime, SLO).
- The planner (`experiments.cell_plan.plan_cells`) builds one per cell, the executor passes
  it on, and `Store.begin_run` writes it: a new cell dimension is one field here (and its
  column in the store).
- What the measuring machine adds (chip, model hash, code version, the runtime's
  effective knobs, start time) stays a keyword of `begin_run`: it is the run's, not the
  cell's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CellRecord:
    experiment: str
    declaration_sha256: str
    arm: str
    concurrency: int
    round: int
    seed: int
    quick: bool
    runtime: str = "bothrows"
    slo_ttft_ms: float | None = None  # the declared service-level objective (None: none)
    slo_tpot_ms: float | None = None
    rate: float | None = None  # a rate sweep's offered rate, requests/s (None: not a sweep)
    looks: str | None = None  # a sequential design's looks, "3,6,12" (None: a fixed design)

    @property
    def key(self) -> tuple:
        """(arm, concurrency, round), and the rate in a sweep: what `Store.complete_cells`
        answers in."""
        base = (self.arm, self.concurrency, self.round)
        return base if self.rate is None else (*base, self.rate)
