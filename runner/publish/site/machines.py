"""A machine is more than its chip's name: what the machine probe (runner/experiments/
probe.py) says about a re-measurement, a column of the claims-on-every-chip table, and
each chip's machines in the provenance.

- Two probes differ when any figure (prefill-sized products, decode-sized products,
  memory read) differs by more than THRESHOLD; the difference is one short clause,
  e.g. "same chip fingerprint, prefill-sized products 2.1x slower".
- A probe difference does not make a separate "machine" in tables: rows stay grouped by
  chip fingerprint (the regime checks, intervals and tables are per chip), and the
  difference is said where it matters, in the re-measurement's note, beside the claims
  in the claims-on-every-chip table, and as one provenance line per machine.
- Data from before the probe (NULL) says nothing.
This module compares figures and writes text; queries.py reads them.
"""

from __future__ import annotations

from typing import NamedTuple

THRESHOLD = 0.15


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
    lead = "same chip fingerprint" if same_chip else "machine probe against the home data's"
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
    """One line per chip and machine (distinct probe) of the newest data; none unprobed."""
    return [
        f"Machine probe on {labels.get(chip, chip)} (runs from {day}, {n} runs): prefill-sized "
        f"products {pre:g} GFLOP/s, decode-sized products {dec:g} GFLOP/s, memory read {read:g} GB/s"
        for chip, pre, dec, read, n, day in reader.judging.probes_by_chip(experiment, quick)
    ]
