"""The chip fingerprint and code version, read from this very machine."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import mlx.core as mx

from runner.experiments import chip
from runner.store.store import chip_id_of


def test_fingerprint_fields_are_filled_from_the_platform():
    fp = chip.fingerprint()
    assert tuple(fp) == chip.FIELDS
    assert fp["device"] == mx.default_device().type.name
    assert fp["mlx_version"] == mx.__version__ and fp["python"] == platform.python_version()
    assert fp["cores"] >= 1 and fp["memory_bytes"] > 2**20 and fp["name"]
    assert chip_id_of(fp) == chip_id_of(chip.fingerprint())  # stable on one machine


def test_blas_is_a_library_this_process_has_mapped():
    blas = chip.blas_library()
    if platform.system() == "Darwin":
        assert "Accelerate" in blas
        return
    maps = Path("/proc/self/maps").read_text()
    assert blas.split(" (")[0] in maps and blas.endswith(")")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_code_version_is_the_commit_with_a_dirty_flag(tmp_path):
    assert chip.code_version(tmp_path) == "unknown"
    git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("a")
    git(tmp_path, "add", "f.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert chip.code_version(tmp_path) == head
    (tmp_path / "f.txt").write_text("b")
    assert chip.code_version(tmp_path) == head + "+dirty"


def test_measurement_folders_do_not_make_the_code_dirty(tmp_path):
    import subprocess

    from runner.experiments.chip import code_version

    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    (tmp_path / "reports" / "data" / "measurements" / "m1").mkdir(parents=True)
    (tmp_path / "reports" / "data" / "measurements" / "m1" / "runs.parquet").write_bytes(b"data")
    assert not code_version(tmp_path).endswith("+dirty")  # a run's own output is data
    (tmp_path / "new.py").write_text("y = 2\n")
    assert code_version(tmp_path).endswith("+dirty")
