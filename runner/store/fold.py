"""Folding the cell folders a cut-off run left into one measurement folder (`runner fold`).

- Why: a run writes each finished cell as a folder of its own and folds them into one
  when it ends (cell_folders.py). A run that never ends (a lost machine, a kill, a
  session's end) leaves one folder a cell: safe, but a record of dozens of one-run
  folders, and the resumed run folds only its own cells.
- What folds: folders holding exactly one run, grouped by experiment, chip, code version
  and declaration (what one invocation of one declaration shares); a group of two or more
  becomes one folder, written as a run's end writes it (measurements.write_measurement),
  checked to hold the group's runs before any cell folder is removed. Folders a post pins
  by name (`keep`) stay as they are: a pin must keep naming a folder that exists.
- A one-run folder whose run another folder of several also holds (a kill between a run's
  folder and the removal of its cell folders) is a leftover: removed, nothing written.
- The database must hold the runs (the caller syncs it from the folders first); folding
  changes which folders hold them, never the runs, so the next load reads the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from runner.store.cell_folders import remove_folder
from runner.store.measurements import measurement_folders, write_measurement
from runner.store.store import Store, StoreError

KEYS = ("experiment", "chip_id", "code_version", "declaration_sha256")


@dataclass(frozen=True)
class CellGroup:
    """One-run folders of one experiment, chip, code version and declaration."""

    experiment: str
    chip_id: str
    code_version: str
    folders: tuple[Path, ...]
    run_ids: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"{len(self.folders)} cell folders of {self.experiment} "
            f"(chip {self.chip_id[:8]}, code {self.code_version})"
        )


def _runs(folder: Path, columns: list[str]) -> list[dict]:
    path = folder / "runs.parquet"
    try:
        return pq.read_table(path, columns=columns).to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise StoreError(f"{path}: not a readable Parquet file ({e})") from None


@dataclass(frozen=True)
class FoldPlan:
    groups: list[CellGroup]  # one-run folders that fold, two or more a group
    pinned: list[str]  # one-run folders a post names: left as they are
    leftovers: list[tuple[Path, str]]  # (one-run folder, the folder that also holds its run):
    # a kill between a run's folder and the removal of its cell folders leaves these
    experiments: frozenset[str]  # every experiment the folders under root hold


def plan_fold(
    root: Path, experiment: str | None = None, keep: Callable[[str], bool] = lambda name: False
) -> FoldPlan:
    """What `runner fold` would do under root (only `experiment`'s folders when given);
    `keep`: whether a post pins the folder of this name."""
    folders = measurement_folders(root) if root.is_dir() else []
    runs = {folder: _runs(folder, ["run_id", *KEYS]) for folder in folders}
    held_by = {r["run_id"]: f for f, rs in runs.items() if len(rs) > 1 for r in rs}
    groups: dict[tuple, list[tuple[Path, str]]] = {}
    leftovers = []
    for folder, rs in runs.items():
        if len(rs) != 1 or (experiment is not None and rs[0]["experiment"] != experiment):
            continue
        run = rs[0]
        if run["run_id"] in held_by:
            leftovers.append((folder, held_by[run["run_id"]].name))
        else:
            groups.setdefault(tuple(run[k] for k in KEYS), []).append((folder, run["run_id"]))
    # a pinned folder stays, and is named only where it would otherwise have gone
    would_go = [f for f, _ in leftovers] + [f for m in groups.values() if len(m) > 1 for f, _ in m]
    pinned = sorted(f.name for f in would_go if keep(f.name))
    leftovers = [(f, holder) for f, holder in leftovers if not keep(f.name)]
    out = []
    for key, members in sorted(groups.items()):
        members = [(f, r) for f, r in members if not keep(f.name)]
        if len(members) > 1:
            out.append(
                CellGroup(key[0], key[1], key[2], tuple(f for f, _ in members), tuple(r for _, r in members))
            )
    return FoldPlan(out, pinned, leftovers, frozenset(r["experiment"] for rs in runs.values() for r in rs))


def cell_groups(root: Path, experiment: str | None = None) -> list[CellGroup]:
    """The groups of one-run folders under root that would fold, ignoring pins."""
    return plan_fold(root, experiment).groups


def fold_group(st: Store, root: Path, group: CellGroup) -> Path:
    """Write the group's runs as one folder, check it holds them, then remove the cell
    folders. A failure before the check leaves every cell folder as it was. The caller
    holds the store's lock throughout, so no run writes cell folders meanwhile."""
    held = {
        r[0]
        for r in st.con.execute(
            "SELECT run_id FROM runs WHERE status = 'complete' AND run_id IN (SELECT unnest(?))",
            [list(group.run_ids)],
        ).fetchall()
    }
    missing = sorted(set(group.run_ids) - held)
    if missing:
        raise StoreError(
            f"{st.path}: holds no complete run {missing[0]} of {group.describe()}; "
            "load the measurement folders first"
        )
    folded = write_measurement(st, list(group.run_ids), root)
    written = [r["run_id"] for r in _runs(folded, ["run_id"])]
    if sorted(written) != sorted(group.run_ids):
        raise StoreError(f"{folded}: holds {len(written)} runs, not the {len(group.run_ids)} folded into it")
    for folder in group.folders:
        if folder != folded:
            remove_folder(folder)
    return folded
