"""The training corpus: the running interpreter's standard-library `.py` sources.

The block drafter's broader prompt set adds the standard library's own tests, idlelib and
lib2to3 (`list_extra_sources`, pinned in `drafter_corpus_manifest.json`): still nothing
from a third-party package, which is where the unseen-text prompts come from.

Pins the file list in a manifest (path relative to the stdlib, size, sha256) so that a
re-run trains on exactly the same bytes, and splits files deterministically into train
and held-out by a hash of their path. This file only reads text; it does not tokenize
or train.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

MANIFEST = Path(__file__).resolve().parent / "corpus_manifest.json"
DRAFTER_MANIFEST = Path(__file__).resolve().parent / "drafter_corpus_manifest.json"
EXTRA_DIRS = frozenset({"test", "tests", "idlelib", "lib2to3"})  # the drafter's broader set
EXCLUDED_DIRS = frozenset({"site-packages"}) | EXTRA_DIRS
HELDOUT_PERCENT = 5  # files whose path hash falls in the first 5 of 100 buckets


class CorpusError(ValueError):
    """The local corpus does not match the manifest (or cannot be read)."""


@dataclass(frozen=True)
class CorpusFile:
    path: str  # relative to the stdlib root, '/'-separated
    size: int
    sha256: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def list_sources(root: Path, extra: bool = False) -> list[CorpusFile]:
    """Every `.py` under root outside the excluded directories, sorted by path; with
    `extra`, instead those under the drafter's extra directories (never site-packages)."""
    found = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        dirs = set(rel.parts[:-1])
        if not p.is_file() or "site-packages" in dirs or bool(dirs & EXTRA_DIRS) != extra:
            continue
        data = p.read_bytes()
        found.append(CorpusFile(rel.as_posix(), len(data), hashlib.sha256(data).hexdigest()))
    return sorted(found, key=lambda f: f.path)


def is_heldout(path: str) -> bool:
    """Deterministic split by file: the same path always lands on the same side."""
    bucket = int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "big") % 100
    return bucket < HELDOUT_PERCENT


def write_manifest(files: list[CorpusFile], root: Path, manifest: Path = MANIFEST) -> None:
    body = {
        "root": "sysconfig.get_paths()['stdlib']",
        "example_root": str(root),
        "excluded_dirs": sorted(EXCLUDED_DIRS),
        "heldout_percent": HELDOUT_PERCENT,
        "total_bytes": sum(f.size for f in files),
        "files": [
            {
                "path": f.path,
                "size": f.size,
                "sha256": f.sha256,
                "split": "heldout" if is_heldout(f.path) else "train",
            }
            for f in files
        ],
    }
    manifest.write_text(json.dumps(body, indent=1) + "\n")


def read_manifest(manifest: Path = MANIFEST) -> list[CorpusFile]:
    try:
        body = json.loads(manifest.read_text())
        return [CorpusFile(f["path"], int(f["size"]), f["sha256"]) for f in body["files"]]
    except FileNotFoundError:
        raise CorpusError(f"{manifest}: missing (run with --rebuild-manifest to create it)") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CorpusError(f"{manifest}: not a corpus manifest ({e.__class__.__name__}: {e})") from None


def list_extra_sources(root: Path) -> list[CorpusFile]:
    return list_sources(root, extra=True)


def verify(root: Path, manifest: Path = MANIFEST, extra: bool = False) -> list[CorpusFile]:
    """The manifest's files, after checking the local bytes match; else CorpusError
    listing the first differences (a different Python build trains a different model)."""
    pinned = read_manifest(manifest)
    local = {f.path: f for f in list_sources(root, extra)}
    problems = []
    for f in pinned:
        got = local.get(f.path)
        if got is None:
            problems.append(f"{f.path}: missing under {root}")
        elif got.sha256 != f.sha256:
            problems.append(f"{f.path}: sha256 differs (size {got.size}, manifest {f.size})")
    extra = sorted(set(local) - {f.path for f in pinned})
    problems += [f"{p}: not in the manifest" for p in extra]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; ... {len(problems) - 5} more" if len(problems) > 5 else "")
        raise CorpusError(
            f"{manifest}: local stdlib at {root} does not match ({len(problems)} "
            f"problem(s)): {shown}. Use --rebuild-manifest to pin this interpreter's files."
        )
    return pinned


def read_text(root: Path, f: CorpusFile) -> str:
    """UTF-8 with undecodable bytes dropped (a few stdlib files are Latin-1)."""
    return (root / f.path).read_bytes().decode("utf-8", errors="ignore")


def split(files: list[CorpusFile]) -> tuple[list[CorpusFile], list[CorpusFile]]:
    train = [f for f in files if not is_heldout(f.path)]
    heldout = [f for f in files if is_heldout(f.path)]
    return train, heldout
