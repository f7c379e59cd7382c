"""Rate sweeps' and fair lengths' questions: `Reader.sweeps`.

- Short and errored requests per cell, the CPU share taken from each run,
  the swept rates, the declared SLO and each request's SLO outcome; `RateReader` gives a
  View one rate's runs of a sweep.
- Runs SQL through the Reader's own connection; connects to nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from runner.publish.sql.sweeps import CONTENTION_SQL, SHORT_CELLS_SQL, SLO_MET_SQL, SLO_SQL, SWEEP_RATES_SQL
from runner.publish.sql.view_queries import judged


@dataclass(frozen=True, slots=True)
class ShortCount:
    """Requests of one cell (over its rounds) that came back shorter than asked, and that
    errored (no answer), of all."""

    short: int
    requests: int
    errored: int = 0


class SweepQueries:
    """Rate sweeps, short requests and contention: a Reader's `sweeps`."""

    def __init__(self, rows):
        self._rows = rows  # (sql, params) -> tuples, through the Reader's one connection

    def short_cells(
        self, experiment: str, quick: bool, as_of: datetime | None = None
    ) -> dict[tuple[str, str, int], ShortCount]:
        """(chip_id, arm, concurrency) -> its short and errored requests, for the cells that
        have any."""
        sql, p = judged(SHORT_CELLS_SQL, {"experiment": experiment, "quick": quick, "as_of": as_of})
        return {(c, a, int(k)): ShortCount(int(s), int(n), int(e)) for c, a, k, s, n, e in self._rows(sql, p)}

    def contention(
        self, experiment: str, quick: bool, as_of: datetime | None = None
    ) -> dict[tuple[str, str, int], dict[int, float]]:
        """(chip_id, arm, concurrency) -> {round: the share of the CPU other processes and
        the hypervisor's steal took}, for in-process arms whose runs recorded it."""
        sql, p = judged(CONTENTION_SQL, {"experiment": experiment, "quick": quick, "as_of": as_of})
        out: dict[tuple[str, str, int], dict[int, float]] = {}
        for c, a, k, r, busy in self._rows(sql, p):
            out.setdefault((c, a, int(k)), {})[int(r)] = float(busy)
        return out

    def sweep_rates(self, experiment: str, quick: bool) -> list[float]:
        """The rates of a rate sweep with complete runs (empty: not a sweep)."""
        return [float(r) for (r,) in self._rows(SWEEP_RATES_SQL, {"experiment": experiment, "quick": quick})]

    def slo(self, experiment: str, quick: bool) -> dict[str, float | None]:
        """The declared SLO: {"ttft_ms": ..., "tpot_ms": ...} (None: not declared)."""
        ttft, tpot = self._rows(SLO_SQL, {"experiment": experiment, "quick": quick})[0]
        return {"ttft_ms": ttft, "tpot_ms": tpot}

    def slo_met(self, experiment: str, quick: bool, as_of: datetime | None = None) -> dict:
        """A rate sweep's SLO outcomes: (chip_id, arm, concurrency) -> rate -> round -> a 0/1
        array (one entry a request, by request id); a cell whose runs declared no SLO has
        NaN entries. Empty for an experiment without a sweep."""
        out: dict[tuple, dict] = {}
        rows = self._rows(*judged(SLO_MET_SQL, {"experiment": experiment, "quick": quick, "as_of": as_of}))
        grouped: dict[tuple, list] = {}
        for chip, arm, conc, rate, rnd, _, met in rows:
            grouped.setdefault((chip, arm, int(conc), float(rate), int(rnd)), []).append(
                np.nan if met is None else float(met)
            )
        for (chip, arm, conc, rate, rnd), values in grouped.items():
            out.setdefault((chip, arm, conc), {}).setdefault(rate, {})[rnd] = np.asarray(values)
        return out


class RateReader:
    """What a View reads (run_values, request_values), of one rate of a rate sweep."""

    def __init__(self, reader, rate: float):
        self.reader, self.rate = reader, rate
        self.judging = reader.judging  # a rate's View asks the same designs

    def run_values(self, *args) -> dict:
        return self.reader.run_values(*args, rate=self.rate)

    def request_values(self, *args) -> dict:
        return self.reader.request_values(*args, rate=self.rate)
