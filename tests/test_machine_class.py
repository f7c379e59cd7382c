"""Machine classes (issue 38): what a reader calls the machine, computed from a chip's
fields or declared by hand; the committed VMs land in their classes; bad names and
classes mixing core counts are refused with one readable error, losing nothing; an
instance without a probe says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from runner.cli import main as cli
from runner.store import machine_class
from runner.store.machine_class import ENV, cpu_model, memory_bucket_gib, of_fingerprint
from runner.store.measurements import sync_database
from runner.store.store import Store, StoreError

REPO = Path(__file__).resolve().parents[1]
MEASUREMENTS = REPO / "reports" / "data" / "measurements"
BOX = {
    "name": "Intel(R) Xeon(R) Processor @ 2.80GHz",
    "device": "cpu",
    "cores": 2,
    "memory_bytes": 25276059648,
    "os": "Linux-6.18.44-fc-v857-x86_64-with-glibc2.36",
    "mlx_version": "0.32.4",
    "blas": "libopenblasp-r0.3.21.so (OpenBLAS, OPENBLAS_NUM_THREADS=1)",
    "python": "3.11.7",
}


@pytest.mark.parametrize(
    "name, model",
    [
        ("Intel(R) Xeon(R) Processor @ 2.80GHz", "Intel Xeon"),
        ("Intel(R) Xeon(R) Processor", "Intel Xeon"),
        ("Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz", "Intel Xeon Platinum 8370C"),
        ("AMD EPYC 7B13 64-Core Processor", "AMD EPYC 7B13"),
        ("AMD EPYC", "AMD EPYC"),
        ("Apple M2 Max", "Apple M2 Max"),
    ],
)
def test_a_cpu_model_loses_its_clock_trademarks_and_noise(name, model):
    assert cpu_model(name) == model


def test_memory_is_bucketed_so_two_vms_of_one_type_agree():
    assert memory_bucket_gib(25276059648) == memory_bucket_gib(25276747776) == 24
    assert memory_bucket_gib(4 << 30) == 4 and memory_bucket_gib(60 << 30) == 64


def test_the_class_label_names_model_cores_and_accelerator_never_a_hash():
    assert of_fingerprint(BOX).label == "Intel Xeon, 2 cores"
    assert of_fingerprint({**BOX, "device": "gpu", "name": "Apple M2 Max", "cores": 12}).label == (
        "Apple M2 Max, 12 cores, GPU"
    )
    other_vm = {
        **BOX,
        "os": "Linux-other-kernel",
        "memory_bytes": 25276514304,
        "name": "Intel(R) Xeon(R) Processor",
    }
    assert of_fingerprint(other_vm) == of_fingerprint(BOX)
    assert of_fingerprint({**BOX, "cores": 4}) != of_fingerprint(BOX)
    assert (
        of_fingerprint({**BOX, "blas": "libblas.so.3 (reference)"}).class_id != of_fingerprint(BOX).class_id
    )
    assert of_fingerprint(BOX, "ci-runner (x86)").label == "ci-runner (x86)"


def test_the_committed_vms_land_in_two_classes(tmp_path):
    folders = [
        "20261129T122702Z-1f87df8d-spec-decode-batching-0a3a6822",
        "20261201T090233Z-22ab24e5-spec-decode-batching-cd4e2cd1",
        "20261201T182650Z-fdde7b9b-spec-decode-batching-6ee70627",
    ]
    root = tmp_path / "measurements"
    for f in folders:
        shutil.copytree(MEASUREMENTS / f, root / f)
    db = tmp_path / "runs.duckdb"
    sync_database(db, root)
    con = duckdb.connect(str(db), read_only=True)
    classes = dict(con.execute("SELECT left(chip_id, 8), class_label FROM chips").fetchall())
    con.close()
    assert classes == {
        "1f87df8d": "AMD EPYC, 2 cores",
        "22ab24e5": "Intel Xeon, 2 cores",
        "fdde7b9b": "Intel Xeon, 2 cores",
    }


def test_this_machine_lands_in_its_cpu_s_class():
    from runner.experiments import chip

    fp = chip.fingerprint()
    assert of_fingerprint(fp).label == f"{cpu_model(fp['name'])}, {fp['cores']} cores" + (
        "" if fp["device"] == "cpu" else ", GPU"
    )


@pytest.mark.parametrize("bad", ["", "  ", "-dash-first", "semi;colon", "x" * 65, "tab\there", "naïve"])
def test_a_name_that_cannot_be_a_label_is_refused_before_anything_runs(bad, capsys, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert cli(["run", "spec-decode-batching", "--check", f"--machine-class={bad}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--machine-class: machine class" in err and "cannot be a label" in err


def test_the_environment_variable_declares_the_class_and_is_checked_too(capsys, monkeypatch):
    monkeypatch.setenv(ENV, "bad|name")
    assert cli(["run", "spec-decode-batching", "--check"]) == 2
    assert f"${ENV}: machine class 'bad|name' cannot be a label" in capsys.readouterr().err
    monkeypatch.setenv(ENV, "CI box")
    assert cli(["run", "spec-decode-batching", "--check"]) == 0


def test_a_declared_class_whose_chips_disagree_on_cores_is_refused_losing_nothing(tmp_path):
    db = tmp_path / "runs.duckdb"
    with Store.open(db) as st:
        first = st.ensure_chip(BOX, "lab box")
        with pytest.raises(
            StoreError, match=r"machine class 'lab box' would hold chips that disagree on core count"
        ):
            st.ensure_chip({**BOX, "cores": 8}, "lab box")
        assert st.con.execute("SELECT chip_id, class_label FROM chips").fetchall() == [(first, "lab box")]
        with pytest.raises(StoreError, match=r"already stored in machine class 'lab box'"):
            st.ensure_chip(BOX, "another name")
        with pytest.raises(StoreError, match=r"cannot be a label"):
            st.ensure_chip({**BOX, "cores": 8}, "bad;name")
        assert st.ensure_chip(BOX) == first  # undeclared: the stored class stands


def test_an_instance_without_a_probe_says_so(tmp_path):
    from fixture_db import FixtureChip, build_fixture

    from runner.publish.site import machines
    from runner.publish.sql.reader import Reader

    db = tmp_path / "runs.duckdb"
    build_fixture(db, chips=(FixtureChip("Fixture X", 100.0),), passes_per_run=4, rounds=2)
    with Reader(db) as reader:
        lines = machines.provenance_lines(reader, "spec-fixture", False, {})
    assert len(lines) == 1 and lines[0].endswith("no probe recorded") and " 0 GFLOP" not in lines[0]


def test_an_instance_far_from_its_class_median_is_flagged():
    rows = [
        ("c", "i1", 40.0, 9.0, 6.0, 10, "2026-12-01"),
        ("c", "i2", 42.0, 9.2, 6.1, 10, "2026-12-02"),
        ("c", "i3", 20.0, 9.1, 6.0, 10, "2026-12-03"),
    ]
    medians = machines_module().class_medians(rows)
    flags = [machines_module().outlying(machines_module().Machine(*r[2:5]), medians["c"]) for r in rows]
    assert (
        flags[:2] == [None, None]
        and flags[2] == "more than 25% from the class median: prefill-sized products -50%"
    )
    assert machine_class.problem_with_label("Intel Xeon, 2 cores") is None


def machines_module():
    from runner.publish.site import machines

    return machines


def test_a_database_from_before_classes_gets_them_when_opened(tmp_path):
    from runner.store.migrations import CLASS_MIGRATION

    db = tmp_path / "runs.duckdb"
    with Store.open(db) as st:  # made as a version-8 database was: chips without classes
        chip_id = st.ensure_chip(BOX)
        for column in ("class_declared", "class_label", "class_id"):
            st.con.execute(f"ALTER TABLE chips DROP COLUMN {column}")
        st.con.execute("DELETE FROM schema_version WHERE version = ?", [CLASS_MIGRATION])
    with Store.open(db) as st:
        assert st.con.execute("SELECT chip_id, class_label, class_declared FROM chips").fetchall() == [
            (chip_id, "Intel Xeon, 2 cores", False)
        ]
