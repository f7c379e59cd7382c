"""The pass-cost model's questions (`passcost.py`, `predict.py`): `Reader.passes`.

- Every chosen run's passes as numpy arrays, the prefill inside decode intervals, each
  arm's declared draft policy and each (chip, arm)'s runtime, as named rows.
- Runs SQL through the Reader's own connection; connects to nothing itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import numpy as np

from runner.publish.sql.home import Cutoff
from runner.publish.sql.passes import ARM_POLICIES_SQL, CHIP_ARM_RUNTIMES_SQL, DECODE_LOAD_SQL, PASS_ROWS_SQL
from runner.publish.sql.view_queries import judged


class RunPasses(NamedTuple):
    """One run's passes as numpy arrays (one entry a pass), for the pass-cost model."""

    chip_id: str
    arm: str
    concurrency: int
    round: int
    width: np.ndarray
    prefill_tokens: np.ndarray
    decode_tokens: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray
    duration_ns: np.ndarray
    drafting_rows: np.ndarray  # rows that carried drafts (at k = 1, the drafts; PASS_ROWS_SQL)


class DecodeLoad(NamedTuple):
    """One run's prefill inside its requests' decode intervals: (request, pass) pairs
    counted over every request, and the prefill tokens of those passes."""

    chip_id: str
    arm: str
    concurrency: int
    round: int
    decode_passes: int
    prefill_tokens: float


class ArmPolicy(NamedTuple):
    """An arm's declared draft decisions (whether it runs the MTP head, its policy) and the
    features that change a pass's cost: the MTP's sync ("eager": it runs every pass) and
    the indexer's top-k (0: dense attention, no indexer), and the drafter ("mtp" or
    "block")."""

    arm: str
    mtp: bool
    draft_policy: str
    mtp_sync: str = "eager"
    index_topk: int = 0
    drafter: str = "mtp"


class PassQueries:
    """The pass-cost model's questions: a Reader's `passes`."""

    def __init__(self, rows, blocks):
        self._rows, self._blocks = rows, blocks  # through the Reader's one connection

    def pass_runs(
        self, experiment: str, quick: bool, as_of: datetime | Cutoff | None = None
    ) -> list[RunPasses]:
        """Every chosen run that has per-pass rows, its passes as arrays."""
        sql, p = judged(
            PASS_ROWS_SQL, {"experiment": experiment, "quick": quick, "as_of": as_of, "label": None}
        )
        fields = RunPasses._fields[4:]
        return [
            RunPasses(*key, *(np.asarray(cols[f], dtype=float) for f in fields))
            for key, cols in self._blocks(sql, p)
        ]

    def decode_loads(
        self, experiment: str, quick: bool, as_of: datetime | Cutoff | None = None
    ) -> list[DecodeLoad]:
        sql, p = judged(DECODE_LOAD_SQL, {"experiment": experiment, "quick": quick, "as_of": as_of})
        return [
            DecodeLoad(c, a, int(k), int(r), int(n), float(pf)) for c, a, k, r, n, pf in self._rows(sql, p)
        ]

    def chip_arm_runtimes(self, experiment: str, quick: bool) -> dict[tuple[str, str], str]:
        """(chip, arm) -> its runtime (runs from before the runtime column: ours)."""
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        return {(c, a): str(rt) for c, a, rt in self._rows(CHIP_ARM_RUNTIMES_SQL, p)}

    def arm_policies(self, experiment: str, quick: bool) -> dict[str, ArmPolicy]:
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        return {
            a: ArmPolicy(a, bool(m), str(pol), str(sync), int(topk), str(drafter))
            for a, m, pol, sync, topk, drafter in self._rows(ARM_POLICIES_SQL, p)
        }
