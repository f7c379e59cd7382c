"""What measured each arm, `Reader.arms`: its runtime and whether its runs
have per-pass rows (`ArmRuntime`), and its runtime and knobs as stored, by which two arms
measured alike are an A/A pair (`aa.py`). Runs SQL through the Reader's own connection.
"""

from __future__ import annotations

from runner.publish.sql.provenance import ARM_RUNTIMES_SQL, ARM_SETUPS_SQL
from runner.publish.sql.rows import ArmRuntime


class ArmQueries:
    """What measured each arm: a Reader's `arms`."""

    def __init__(self, rows):
        self._rows = rows  # (sql, params) -> tuples, through the Reader's one connection

    def arm_runtimes(self, experiment: str, quick: bool) -> dict[str, ArmRuntime]:
        """arm -> (its runtime, whether its runs have per-pass rows)."""
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        return {a: ArmRuntime(rt, bool(has)) for a, rt, has in self._rows(ARM_RUNTIMES_SQL, p)}

    def arm_setups(self, experiment: str, quick: bool) -> dict[str, frozenset[tuple[str, str]]]:
        """arm -> the (runtime, knobs JSON) pairs its chosen runs were measured with."""
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        out: dict[str, set] = {}
        for arm, runtime, knobs in self._rows(ARM_SETUPS_SQL, p):
            out.setdefault(arm, set()).add((runtime, knobs))
        return {a: frozenset(s) for a, s in out.items()}
