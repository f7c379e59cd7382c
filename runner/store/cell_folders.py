"""Every finished cell in the committed record at once: a folder per cell while a run goes
on, folded into the run's one folder when it ends.

- When a cell completes, its run is written as a measurement folder of its own (the
  format of measurements.py, under a hidden name, then renamed), so a SIGKILL, an
  out-of-memory kill or a lost machine at any moment leaves every finished cell in a
  folder and never a half-written file the loader reads (hidden names are unfinished).
- When the run ends (however it ends, short of a kill), its cells are written as one
  folder and the cell folders are removed (renamed hidden first, so a kill mid-removal
  leaves nothing the loader reads). A kill between the two leaves the same runs in two
  folders: the loader imports by run id, so they load once.
- Hidden folders an earlier killed process left are swept before writing.
This module only writes folders; the loader is measurements.py's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from runner.store.measurements import write_measurement
from runner.store.store import Store

UNFINISHED = ".tmp-"  # a hidden folder's infix: `.<name>.tmp-<pid>` (see write_measurement)
REMOVING = ".removing-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_unfinished(root: Path) -> list[str]:
    """Remove hidden folders left by a process that no longer runs; returns their names."""
    swept = []
    if not root.is_dir():
        return swept
    for p in root.iterdir():
        if not (p.is_dir() and p.name.startswith(".")):
            continue
        for infix in (UNFINISHED, REMOVING):
            head, sep, pid = p.name.rpartition(infix)
            if sep and head and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(p, ignore_errors=True)
                swept.append(p.name)
    return sorted(swept)


def remove_folder(folder: Path) -> None:
    """Hide first, then delete: a kill mid-delete leaves only a hidden folder."""
    hidden = folder.with_name(f".{folder.name}{REMOVING}{os.getpid()}")
    try:
        folder.rename(hidden)
    except FileNotFoundError:
        return
    shutil.rmtree(hidden, ignore_errors=True)


@dataclass
class CellFolders:
    """The folders this run invocation wrote for its finished cells, by run id."""

    root: Path
    written: dict[str, Path] = field(default_factory=dict)

    def write(self, st: Store, run_id: str) -> Path:
        if not self.written:
            self.root.mkdir(parents=True, exist_ok=True)
            sweep_unfinished(self.root)
        folder = write_measurement(st, [run_id], self.root)
        self.written[run_id] = folder
        return folder

    def fold(self, run_ids: set[str], keep: list[Path]) -> int:
        """Remove the cell folders of the given runs, now in the run's folders `keep` (a
        one-cell run's folder is its cell folder: kept); returns how many were removed."""
        gone = [r for r in sorted(self.written) if r in run_ids]
        removed = 0
        for r in gone:
            folder = self.written.pop(r)
            if folder not in keep:
                remove_folder(folder)
                removed += 1
        return removed
