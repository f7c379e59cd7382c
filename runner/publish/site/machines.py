"""A machine is more than its chip's name: what the machine probe (runner/experiments/
probe.py) says about a re-measurement, a column of the claims-on-every-chip table, and
each class's instances in the provenance.

- Two probes differ when any figure (prefill-sized products, decode-sized products,
  memory read) differs by more than THRESHOLD; the difference is one short clause,
  e.g. "same chip fingerprint, prefill-sized products 2.1x slower".
- A probe difference does not make a separate "machine" in tables: rows stay grouped by
  machine class (the regime checks, intervals and tables are per class), and the
  difference is said where it matters, in the re-measurement's note, beside the claims
  in the claims-on-every-chip table, and as one provenance line per instance (VM), its
  hash, runs and probe, flagged when more than OUTLIER from its class's median.
- Data from before the probe (NULL) says nothing.
This module compares figures and writes text; queries.py reads them.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

THRESHOLD = 0.15
OUTLIER = 0.25  # an instance this far from its class's median probe is flagged in provenance


class Machine(NamedTuple):
    prefill_gflops: float
    decode_gflops: float
    read_gbps: float


NAMES = ("prefill-sized products", "decode-sized products", "memory reads")


def difference(home: Machine | tuple | None, other: Machine | tuple | None, same_chip: bool) -> str | None:
    """One clause naming each figure that differs by more than THRESHOLD (None: alike,
    or either machine not probed)."""
    if home is None or other is None:
        return None
    parts = []
    for name, h, o in zip(NAMES, home, other):
        if not h or not o or abs(o / h - 1) <= THRESHOLD and abs(h / o - 1) <= THRESHOLD:
            continue
        parts.append(f"{name} {h / o:.1f}x slower" if o < h else f"{name} {o / h:.1f}x faster")
    if not parts:
        return None
    lead = "same machine class" if same_chip else "machine probe against the home data's"
    return f"{lead}, " + ", ".join(parts)


def group_difference(reader, experiment: str, quick: bool, judging):
    """For a later measurement's note: (chip, its runs) -> what its machine differs in from
    the home data's (None: nothing worth a word, or no probe on either side)."""
    cut = judging.cutoff() if judging is not None and judging.chip_id is not None else None
    if cut is None:
        return None
    home = reader.judging.probe_of_view(experiment, quick, cut, judging.chip_id)
    return lambda chip, runs: difference(
        home, reader.judging.probe_of_runs([r.run_id for r in runs]), chip == judging.chip_id
    )


def column_note(reader, experiments: dict[str, bool], judging, chip: str, later: list[str]) -> str | None:
    """What a claims-table column's machine differs in: the chip's runs measured after
    the home data (`later`, run ids), else its newest data."""
    cut = judging.cutoff() if judging is not None and judging.chip_id is not None else None
    if cut is None:
        return None
    for e, q in experiments.items():
        there = reader.judging.probe_of_runs(later) if later else reader.judging.probe_of_view(e, q, None, chip)
        said = difference(reader.judging.probe_of_view(e, q, cut, judging.chip_id), there, chip == judging.chip_id)
        if said:
            return said
    return None


def provenance_lines(reader, experiment: str, quick: bool, labels: dict) -> list[str]:
    """One line per instance (and distinct probe) of each machine class in the newest data,
    with its hash, run count and probe figures; "no probe recorded" for data from before
    the probe, never zeros; a figure more than OUTLIER from the class's median flagged."""
    rows = reader.judging.probes_by_chip(experiment, quick)
    medians = class_medians(rows)
    lines = []
    for chip, instance, pre, dec, read, n, day in rows:
        head = f"Machine probe on {labels.get(chip, chip)}, instance {instance[:8]} (runs from {day}, {n} runs): "
        if pre is None:
            lines.append(head + "no probe recorded")
            continue
        figures = (
            f"prefill-sized products {pre:g} GFLOP/s, decode-sized products {dec:g} GFLOP/s, memory read {read:g} GB/s"
        )
        far = outlying(Machine(pre, dec, read), medians.get(chip))
        lines.append(head + figures + (f"; {far}" if far else ""))
    return lines


def class_medians(rows) -> dict[str, Machine]:
    """Each class's median probe over its probed instances (only where it has two or more)."""
    by_class: dict[str, list[Machine]] = {}
    for chip, _instance, pre, dec, read, _n, _day in rows:
        if pre is not None:
            by_class.setdefault(chip, []).append(Machine(pre, dec, read))
    return {
        chip: Machine(*(statistics.median(f) for f in zip(*probes)))
        for chip, probes in by_class.items()
        if len(probes) > 1
    }


def outlying(probe: Machine, median: Machine | None) -> str | None:
    """The clause flagging an instance whose figure is more than OUTLIER from its class's
    median (None: within, or no median): the class may be hiding two kinds of machine."""
    if median is None:
        return None
    far = [
        f"{name} {p / m - 1:+.0%}"
        for name, p, m in zip(NAMES, probe, median)
        if p and m and abs(p / m - 1) > OUTLIER
    ]
    return ("more than 25% from the class median: " + ", ".join(far)) if far else None
