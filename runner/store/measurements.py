"""The committed raw data: a folder of measurement folders, and the DuckDB file rebuilt
from them.

Each measurement is its own folder of chips/runs/requests/passes/tokens.parquet (the
`runner export` format; folders written before per-token times have no tokens.parquet,
and load as runs without token rows) named `<UTC start>-<chip_id[:8]>-<experiment>-<run-ids hash>`,
e.g. `20261129T122702Z-1f87df8d-spec-decode-batching-3e5a0c1f`: one experiment on one
chip, written once and never changed. Two branches that each measure add two different
paths, so git merges them without a conflict. The measurements of a database file live
in `measurements/` beside it (`reports/data/measurements/` for
`reports/data/runs.duckdb`).

The database is a cache of that folder set. `sync_database` rebuilds it from scratch
(folders in sorted order, into a new file that replaces the old one only once it is
complete) whenever the set of folder names and file sha256s differs from the manifest
stored in it, so its contents depend only on the files, never on history or load
order. Complete runs the old file holds that came from no folder (a run whose folder
could not be written, a cell a kill caught between its commit and its folder, a database
from before this layout) are first written to new folders of their own, even when the
folder set is unchanged, so a load never loses a measurement. While a run goes on, each
finished cell has a folder of its own (cell_folders.py). Without a `measurements/`
folder the database is left as it is. This module does not measure or render anything.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from runner.store.exchange import REQUIRED_TABLES, TABLES, export_runs, import_tables
from runner.store.store import Store, StoreError, StoreLocked


class FoldsCells(Protocol):
    """What a run's cell folders (cell_folders.CellFolders) offer once the run's folder is
    written: dropping the cell folders it now holds."""

    def fold(self, run_ids: set[str], keep: list[Path]) -> int: ...


FOLDER = "measurements"
# The manifest a rebuilt database carries: which files it was loaded from, and which runs
# came from which folder (runs added later by `runner run` are the ones a rebuild must
# rescue; a post's `data:` pin names folders, runner.publish.sql.home).
MANIFEST_DDL = (
    "CREATE TABLE measurement_files (folder VARCHAR NOT NULL, file VARCHAR NOT NULL, "
    "sha256 VARCHAR NOT NULL); CREATE TABLE measurement_runs (run_id VARCHAR NOT NULL, folder VARCHAR);"
)

Manifest = tuple[tuple[str, str, str], ...]  # sorted (folder name, file name, sha256)


@dataclass
class LoadResult:
    db: Path
    root: Path
    folders: int
    runs: int
    rebuilt: bool
    rescued: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        saved = "".join(
            f"; saved {p.name}, runs {self.db.name} held in no measurement folder" for p in self.rescued
        )
        if not self.rebuilt:
            return f"{self.db} is up to date with the {self.folders} measurement folder(s) in {self.root}"
        return (
            f"loaded {self.folders} measurement folder(s) ({self.runs} runs) from {self.root} "
            f"into {self.db}{saved}"
        )


def folder_of(db: str | os.PathLike) -> Path:
    """Where the measurement folders of a database file live."""
    return Path(db).parent / FOLDER


def folder_name(runs: pa.Table) -> str:
    """`<UTC start>-<chip_id[:8]>-<experiment>-<hash of the run ids>`: sorts by time, and
    is unique across machines and branches because run ids are random."""
    experiments, chips = set(runs.column("experiment").to_pylist()), set(runs.column("chip_id").to_pylist())
    if len(experiments) != 1 or len(chips) != 1:
        raise StoreError(
            f"a measurement folder holds one experiment on one chip, not "
            f"{sorted(experiments)} on {sorted(chips)}"
        )
    start = min(runs.column("started_at").to_pylist()).strftime("%Y%m%dT%H%M%SZ")  # naive UTC
    ids = hashlib.sha256("\n".join(sorted(runs.column("run_id").to_pylist())).encode()).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", experiments.pop()).strip("-.") or "experiment"
    return f"{start}-{chips.pop()[:8]}-{name}-{ids[:8]}"


def write_measurement(st: Store, run_ids: list[str], root: Path) -> Path:
    """Export the given complete runs (one experiment, one chip) as a new folder in root,
    written under a hidden name and renamed, so a crash never leaves half a folder."""
    runs = st.con.sql(
        "SELECT run_id, experiment, chip_id, started_at FROM runs WHERE run_id IN (SELECT unnest(?))",
        params=[list(run_ids)],
    ).to_arrow_table()
    final = root / folder_name(runs)
    if final.is_dir():  # the same runs, already written
        return final
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        export_runs(st, run_ids, tmp)
        tmp.rename(final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StoreError(f"{final}: cannot write the measurement folder: {e}") from None
    return final


def write_runs(st: Store, run_ids: set[str], root: Path) -> list[Path]:
    """One folder per (experiment, chip) among the given complete runs."""
    if not run_ids:
        return []
    groups = st.con.execute(
        "SELECT list(run_id ORDER BY run_id) FROM runs WHERE run_id IN (SELECT unnest(?)) "
        "GROUP BY experiment, chip_id ORDER BY experiment, chip_id",
        [sorted(run_ids)],
    ).fetchall()
    return [write_measurement(st, ids, root) for (ids,) in groups]


def complete_run_ids(db: str | os.PathLike) -> set[str]:
    """The complete runs of a database file (none when it does not exist)."""
    if not Path(db).exists():
        return set()
    with Store.open(db) as st:
        return {r[0] for r in st.con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()}


def save_new_runs(
    db: str | os.PathLike, before: set[str], cells: FoldsCells | None = None
) -> list[tuple[Path, int]]:
    """Write the database's complete runs that are not in `before` to new measurement
    folders, then remove the cell folders (`cells`) written for them as each finished;
    returns (folder, runs) for each (none when nothing completed)."""
    with Store.open(db) as st:
        now = {r[0] for r in st.con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()}
        new = now - before
        root = folder_of(db)
        if new:
            root.mkdir(parents=True, exist_ok=True)
        folders = write_runs(st, new, root)
        if cells is not None:
            cells.fold(new, keep=folders)
        return [(f, pq.read_metadata(f / "runs.parquet").num_rows) for f in folders]


def measurement_folders(root: Path) -> list[Path]:
    """The measurement folders, sorted by name (hidden ones are unfinished writes)."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def manifest(root: Path) -> Manifest:
    rows = []
    for folder in measurement_folders(root):
        for t in TABLES:
            path = folder / f"{t}.parquet"
            if t not in REQUIRED_TABLES and not path.exists():
                continue  # a folder from before the table existed
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as e:
                raise StoreError(
                    f"{path}: measurement folder {folder.name} lacks its {t} table ({e.strerror})"
                ) from None
            rows.append((folder.name, path.name, digest))
    return tuple(sorted(rows))


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as e:
        raise StoreError(f"{path}: not a readable Parquet file ({e})") from None


def read_folder(folder: Path) -> dict[str, pa.Table]:
    return {
        t: _read(folder / f"{t}.parquet")
        for t in TABLES
        if t in REQUIRED_TABLES or (folder / f"{t}.parquet").exists()
    }


def _stored_manifest(st: Store) -> tuple[Manifest | None, set[str]]:
    has = st._one("SELECT count(*) FROM information_schema.tables WHERE table_name = 'measurement_files'")[0]
    if not has:
        return None, set()
    files = tuple(
        st.con.execute("SELECT folder, file, sha256 FROM measurement_files ORDER BY ALL").fetchall()
    )
    by_folder = st._one(
        "SELECT count(*) FROM information_schema.columns "
        "WHERE table_name = 'measurement_runs' AND column_name = 'folder'"
    )[0]
    if not by_folder:  # loaded before runs were recorded by folder: rebuild once
        files = None
    return files, {r[0] for r in st.con.execute("SELECT run_id FROM measurement_runs").fetchall()}


def load_folders(folders: list[Path], db: Path, files: Manifest) -> int:
    """Build a fresh database at db from the folders, in the order given; the previous
    file is replaced only once the new one is complete. Returns the runs loaded."""
    tables = {folder: read_folder(folder) for folder in folders}  # every file read before writing
    tmp = db.with_name(f"{db.name}.loading-{os.getpid()}")
    _remove(tmp)
    try:
        with Store.open(tmp) as st:
            for folder, t in tables.items():
                import_tables(st, t, str(folder))
            st.con.execute(MANIFEST_DDL)
            st.con.executemany("INSERT INTO measurement_files VALUES (?, ?, ?)", [list(r) for r in files])
            st.con.executemany(
                "INSERT INTO measurement_runs VALUES (?, ?)",
                [
                    [r, folder.name]
                    for folder, t in tables.items()
                    for r in t["runs"].column("run_id").to_pylist()
                ],
            )
            runs = st._one("SELECT count(*) FROM runs")[0]
            st.con.execute("CHECKPOINT")
        Path(f"{db}.wal").unlink(missing_ok=True)  # the old file's log must not replay onto the new one
        os.replace(tmp, db)
    except BaseException:
        _remove(tmp)
        raise
    return int(runs)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    Path(f"{path}.wal").unlink(missing_ok=True)


def sync_database(db: str | os.PathLike, root: Path | None = None) -> LoadResult | None:
    """Bring db in line with the measurement folders (None when there is no folder set).
    A bad folder or file is one StoreError naming it, and the old database stays."""
    db = Path(db).resolve()
    root = (root or folder_of(db)).resolve()
    if not root.is_dir():
        return None
    files = manifest(root)
    rescued: list[Path] = []
    if db.exists():
        try:
            old = Store.open(db)
        except StoreLocked:
            raise
        except StoreError:
            old = None  # unreadable: the folders hold the data, rebuild from them
        if old is not None:
            with old:
                stored, loaded = _stored_manifest(old)
                complete = {
                    r[0]
                    for r in old.con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()
                }
                if stored == files and not complete - loaded:
                    return LoadResult(db, root, len(measurement_folders(root)), 0, rebuilt=False)
                in_folders = {
                    r
                    for f in measurement_folders(root)
                    for r in _read(f / "runs.parquet", ["run_id"]).column("run_id").to_pylist()
                }
                orphans = complete - loaded - in_folders
                rescued = write_runs(old, orphans, root)
            if rescued:
                files = manifest(root)
    folders = measurement_folders(root)
    runs = load_folders(folders, db, files)
    return LoadResult(db, root, len(folders), runs, rebuilt=True, rescued=rescued)
