"""The judging views' questions (`home.py`'s Cutoff): `Reader.judging`.

- `judged` turns any page query over the newest runs into one over a view's runs: each
  cell's earliest run up to a date, or the runs of the folders a `data:` pin names.
- The runs a view passed over (a same-day re-measurement), the folders a pin names, and
  the machine probes of runs and views (`machines.py`).
- Runs SQL through the Reader's own connection; connects to nothing itself.
"""

from __future__ import annotations

from datetime import datetime

from runner.publish.sql.classes import POOLED_SQL
from runner.publish.sql.home import Cutoff
from runner.publish.sql.pages import CHOSEN_RUNS
from runner.publish.sql.rows import LaterRun
from runner.publish.sql.views import (
    DESIGNS_SQL,
    FOLDERS_OF_CHIPS_SQL,
    MEASUREMENT_FOLDERS_SQL,
    PROBE_OF_RUNS_SQL,
    PROBE_OF_VIEW_SQL,
    PROBES_BY_CHIP_SQL,
    RUNS_OF_FOLDERS_SQL,
    UNSEEN_SQL,
    picked,
)


def judged(sql: str, params: dict) -> tuple[str, dict]:
    """A page query and its parameters over a judging view's runs when `as_of` is a
    Cutoff (home.py), unchanged otherwise."""
    cut = params.get("as_of")
    if not isinstance(cut, Cutoff):
        return sql, params
    return picked(sql, cut.data is not None), {
        **params,
        "as_of": cut.at,
        "first_from": cut.first_from,
        "fresh": cut.fresh,
        "declaration": cut.declaration,
        "data": list(cut.data or ()),
    }


class ViewQueries:
    """Judging views and machine probes: a Reader's `judging`."""

    def __init__(self, rows):
        self._rows = rows  # (sql, params) -> tuples, through the Reader's one connection

    def unseen(self, experiment: str, quick: bool, cut: Cutoff, chip: str) -> list[LaterRun]:
        """The chip's runs the judging view passed over (REMEASURED_SQL's shape)."""
        sql, p = judged(
            "WITH " + CHOSEN_RUNS + UNSEEN_SQL, {"experiment": experiment, "quick": quick, "as_of": cut}
        )
        return [
            LaterRun(run_id, c, arm, int(k), int(r), day, code, ran, started)
            for run_id, c, arm, k, r, day, code, ran, started in self._rows(sql, {**p, "chip": chip})
        ]

    def folders_of_chips(self, experiment: str, quick: bool, cut: Cutoff, chips: set[str]) -> list[str]:
        """The measurement folders of the view's runs on the given chips."""
        p = {"experiment": experiment, "quick": quick, "as_of": cut}
        sql, p = judged("WITH " + CHOSEN_RUNS + FOLDERS_OF_CHIPS_SQL, p)
        return [r[0] for r in self._rows(sql, {**p, "chips": sorted(chips)})]

    def probe_of_runs(self, run_ids: list[str]) -> tuple | None:
        """(prefill GFLOP/s, decode GFLOP/s, read GB/s) medians of the runs; None: unprobed."""
        row = self._rows(PROBE_OF_RUNS_SQL, {"run_ids": sorted(run_ids)})[0]
        return None if row[0] is None else tuple(row)

    def probe_of_view(self, experiment: str, quick: bool, cut: Cutoff | None, chip: str) -> tuple | None:
        """The same medians over a view's runs on one chip (cut None: the newest)."""
        p = {"experiment": experiment, "quick": quick, "as_of": cut}
        sql, p = judged("WITH " + CHOSEN_RUNS + PROBE_OF_VIEW_SQL, p)
        row = self._rows(sql, {**p, "chip": chip})[0]
        return None if row[0] is None else tuple(row)

    def probes_by_chip(self, experiment: str, quick: bool) -> list[tuple]:
        """(chip, instance, prefill, decode, read, runs, first day) per instance and probe of
        each chip (machine class), newest data; the figures None where none was probed."""
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        return self._rows("WITH " + CHOSEN_RUNS + PROBES_BY_CHIP_SQL, p)

    def pooled(self, experiment: str, quick: bool) -> dict[str, tuple[int, int]]:
        """chip (machine class) -> (instances, rounds) its newest data pools."""
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        return {c: (int(n), int(r)) for c, n, r in self._rows("WITH " + CHOSEN_RUNS + POOLED_SQL, p)}

    def measurement_folders(self, experiment: str) -> list[str] | None:
        """The folders the experiment's runs were loaded from (None: not loaded from folders)."""
        if not self.measurement_folders_loaded():
            return None
        return [r[0] for r in self._rows(MEASUREMENT_FOLDERS_SQL, {"experiment": experiment})]

    def designs(self, experiment: str, quick: bool, as_of: datetime | Cutoff | None) -> dict[str, str]:
        """chip -> the looks of the sequential design its chosen runs were measured under
        (the one with the most looks when runs differ); chips of a fixed design are absent."""
        sql, p = judged(
            "WITH " + CHOSEN_RUNS + DESIGNS_SQL, {"experiment": experiment, "quick": quick, "as_of": as_of}
        )
        out: dict[str, str] = {}
        for chip, looks in self._rows(sql, p):
            if chip not in out or (looks.count(","), looks) > (out[chip].count(","), out[chip]):
                out[chip] = looks
        return out

    def runs_of_folders(self, folders: tuple[str, ...]) -> set[str]:
        """The run ids loaded from these measurement folders (a post's `data:` pin)."""
        if not folders or not self.measurement_folders_loaded():
            return set()
        rows = self._rows(RUNS_OF_FOLDERS_SQL, {"folders": sorted(folders)})
        return {r[0] for r in rows}

    def measurement_folders_loaded(self) -> bool:
        """Whether the database was loaded from measurement folders (it knows each run's)."""
        return bool(
            self._rows(
                "SELECT count(*) FROM information_schema.columns WHERE table_name = 'measurement_runs' "
                "AND column_name = 'folder'",
                {},
            )[0][0]
        )
