"""Regime completeness: every chip in the data must have batch 1 and the experiment's
ceiling (its largest concurrency) measured for every arm.

Works on the experiment's layout (cells with runs of any status) and the cells that have
complete data; lists every gap rather than stopping at the first. It does not query or
render anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.publish.sql.rows import CellKey


@dataclass(frozen=True, slots=True)
class Gap:
    chip_id: str
    chip_name: str
    arm: str
    concurrency: int
    regime: str  # "batch 1" | "ceiling"

    def describe(self) -> str:
        return (
            f"chip {self.chip_name!r} arm {self.arm!r} has no complete run at "
            f"{self.regime} (concurrency {self.concurrency})"
        )


@dataclass(frozen=True, slots=True)
class Regimes:
    ceiling: int
    chips: tuple[str, ...]  # chip ids, in page order
    arms: tuple[str, ...]
    concurrencies: tuple[int, ...]  # every concurrency in the data, 1 and ceiling included
    gaps: tuple[Gap, ...]

    def regime_of(self, concurrency: int) -> str:
        if concurrency == 1:
            return "batch 1"
        return "ceiling" if concurrency == self.ceiling else ""


def check_regimes(
    layout: list[CellKey],
    measured: set[tuple[str, str, int]],
    chip_order: list[str],
    chip_names: dict[str, str],
) -> Regimes:
    """layout: (chip_id, arm, concurrency) of all runs; measured: those with complete data."""
    ceiling = max((cell.concurrency for cell in layout), default=1)
    arms = tuple(sorted({cell.arm for cell in layout}))
    concurrencies = tuple(sorted({cell.concurrency for cell in layout} | {1, ceiling}))
    gaps = []
    for chip in chip_order:
        for arm in arms:
            for conc, regime in ((1, "batch 1"), (ceiling, "ceiling")):
                if (chip, arm, conc) not in measured and not (regime == "ceiling" and ceiling == 1):
                    gaps.append(Gap(chip, chip_names.get(chip, chip), arm, conc, regime))
    return Regimes(ceiling, tuple(chip_order), arms, concurrencies, tuple(gaps))
