"""One experiment's data as of a moment: its cells with their 95% intervals.

A `View` is what a page block or a claim reads: the per-run values the
query layer returns for complete runs started before `as_of` (None: all of them), the
intervals over their rounds (`intervals.py`), and a lazy mapping (chip, arm, concurrency, metric)
-> CellStat that computes each cell's interval the first time it is asked for. Views are
cached per (experiment, quickness, as_of, request label, rate) for one post, since a post is
rendered several times (once per chip in the claims-on-every-chip table) over the same data.
A rate sweep's View of one rate reads through `sweep_queries.RateReader`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from runner.publish.sql import sweep_queries
from runner.publish.sql.reader import CellStat, Reader
from runner.publish.stats.intervals import Estimate, Intervals
from runner.publish.stats.sequential import parse_looks


class CellMap(Mapping):
    """(chip, arm, concurrency, metric) -> CellStat for every cell with a value."""

    def __init__(self, intervals: Intervals, runs: dict):
        self.intervals = intervals
        self._keys = sorted(
            {(c, a, k, m) for (c, a, k, _), vals in runs.items() for m, v in vals.items() if v is not None}
        )
        self._index = set(self._keys)
        self._cache: dict[tuple, CellStat] = {}

    def __getitem__(self, key: tuple) -> CellStat:
        if key not in self._index:
            raise KeyError(key)
        if key not in self._cache:
            chip, arm, conc, metric = key
            e = self.intervals.estimate(metric, chip, arm, conc)
            self._cache[key] = CellStat(chip, arm, conc, metric, e.value, e.lo, e.hi, e.n_rounds)
        return self._cache[key]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class View:
    def __init__(
        self,
        reader: Reader,
        experiment: str,
        quick: bool,
        as_of: datetime | None,
        label: str | None = None,
    ):
        self.experiment, self.quick, self.as_of, self.label = experiment, quick, as_of, label
        self.reader = reader
        self._requests: dict | None = None
        self.runs = reader.run_values(experiment, quick, as_of, label)
        designs = {c: parse_looks(s) for c, s in reader.judging.designs(experiment, quick, as_of).items()}
        self.intervals = Intervals(self.runs, lambda: self.requests, designs)
        self.cells = CellMap(self.intervals, self.runs)
        self.measured = {(c, a, k) for (c, a, k, _) in self.runs}
        self.chip_ids = tuple(sorted({c for (c, _, _, _) in self.runs}))

    def compare(self, metric: str, chip: str, arm: str, base: str, conc: int, kind: str) -> Estimate:
        return self.intervals.compare(metric, chip, arm, base, conc, kind)

    @property
    def requests(self) -> dict:
        """RunKey -> column -> (request ids, values): each run's per-request figures, read
        only when a figure needs them (a post's own percentile, quantiles.py)."""
        if self._requests is None:
            self._requests = self.reader.request_values(self.experiment, self.quick, self.as_of, self.label)
        return self._requests


class ViewCache:
    """Views of one post's experiments, shared by every rendering of that post."""

    def __init__(self, reader: Reader):
        self.reader = reader
        self._views: dict[tuple, View] = {}

    def get(
        self,
        experiment: str,
        quick: bool,
        as_of: datetime | None,
        label: str | None = None,
        rate: float | None = None,
    ) -> View:
        """The View of those runs; with `rate`, of that rate's runs of a rate sweep only."""
        key = (experiment, quick, as_of, label, rate)
        if key not in self._views:
            reader = self.reader if rate is None else sweep_queries.RateReader(self.reader, rate)
            self._views[key] = View(reader, experiment, quick, as_of, label)
        return self._views[key]
