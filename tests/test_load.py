"""The machine-load figures stored beside each run: real /proc here, and /proc/stat
files written by the test for exact fractions and for kernels that report less."""

from __future__ import annotations

import sys

import pytest

from runner.experiments import load
from runner.experiments.load import COLUMNS, Sample, figures, sample
from runner.store.store import LOAD_COLUMNS


def stat_file(tmp_path, name: str, fields: str):
    path = tmp_path / name
    path.write_text(f"cpu  {fields}\ncpu0 {fields}\nintr 1 2 3\n")
    return path


def test_the_columns_are_the_store_s():
    assert COLUMNS == LOAD_COLUMNS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_this_machine_reports_load_and_cpu_time():
    start = sample()
    sum(i * i for i in range(200_000))  # some CPU time of our own between the samples
    out = figures(start, sample())
    assert set(out) == set(COLUMNS)
    assert out["loadavg_start"] is not None and out["loadavg_start"] >= 0
    assert start.ticks is not None and len(start.ticks) >= 4


def test_fractions_from_two_samples(tmp_path):
    hz = load._ticks_per_second()
    # user nice system idle iowait irq softirq steal (guest guest_nice, already in user):
    # 1000 ticks pass, 350 idle or waiting, 50 stolen, so 600 busy
    a = Sample(1.0, load._cpu_ticks(stat_file(tmp_path, "a", "100 0 100 1000 0 0 0 10 0 0")), 0.0)
    b = Sample(
        2.5, load._cpu_ticks(stat_file(tmp_path, "b", "500 0 300 1330 20 0 0 60 9 9")), 200 / hz
    )  # we used 200 of the 600 busy ticks
    out = figures(a, b)
    assert (out["loadavg_start"], out["loadavg_end"]) == (1.0, 2.5)
    assert out["steal_fraction"] == pytest.approx(50 / 1000)
    assert out["busy_fraction_other"] == pytest.approx((600 - 200) / 1000)


def test_a_kernel_without_steal_and_a_platform_without_proc_give_none(tmp_path):
    old = load._cpu_ticks(stat_file(tmp_path, "a", "100 0 100 1000"))
    new = load._cpu_ticks(stat_file(tmp_path, "b", "200 0 100 1100"))
    out = figures(Sample(0.5, old, 0.0), Sample(0.5, new, 0.0))
    assert out["steal_fraction"] is None and out["busy_fraction_other"] == pytest.approx(0.5)
    nowhere = sample(stat=tmp_path / "no-such-stat")
    assert nowhere.ticks is None
    out = figures(nowhere, nowhere)
    assert (out["steal_fraction"], out["busy_fraction_other"]) == (None, None)
    garbage = tmp_path / "junk"
    garbage.write_text("not a stat file\n")
    assert load._cpu_ticks(garbage) is None


def test_no_elapsed_ticks_or_a_reset_counter_gives_none(tmp_path):
    ticks = load._cpu_ticks(stat_file(tmp_path, "a", "100 0 100 1000 0 0 0 10"))
    same = figures(Sample(1.0, ticks, 0.0), Sample(1.0, ticks, 0.0))
    assert (same["steal_fraction"], same["busy_fraction_other"]) == (None, None)
    lower = load._cpu_ticks(stat_file(tmp_path, "b", "50 0 100 2000 0 0 0 10"))
    reset = figures(Sample(1.0, ticks, 0.0), Sample(1.0, lower, 0.0))
    assert reset["busy_fraction_other"] is None


def test_an_iowait_count_that_goes_back_is_not_a_reset(tmp_path):
    """proc(5): the iowait field is unreliable and can decrease; a cell must not lose its
    load figures for it (one did, in a clean clone's suite on a VM)."""
    a = load._cpu_ticks(stat_file(tmp_path, "a", "100 0 100 1000 40 0 0 10"))
    b = load._cpu_ticks(stat_file(tmp_path, "b", "200 0 100 1100 38 0 0 10"))
    out = figures(Sample(1.0, a, 0.0), Sample(1.0, b, 0.0))
    assert out["busy_fraction_other"] == pytest.approx(0.5) and out["steal_fraction"] == 0.0


def test_a_cell_that_closes_before_a_tick_waits_for_one(tmp_path):
    """A cell of a few tens of milliseconds on a VM, whose ticks come in bursts, closed
    before any was counted and stored no busy fraction (a flaky end-to-end test)."""
    import threading

    path = stat_file(tmp_path, "s", "100 0 100 1000 0 0 0 10")
    start = load.sample(path)
    ticked = stat_file(tmp_path, "u", "101 0 100 1001 0 0 0 10")
    later = threading.Timer(0.02, lambda: ticked.replace(path))  # atomic: never read half written
    later.start()
    end = load.closing_sample(start, path, wait_s=5.0)
    later.join()
    assert end.ticks == (101, 0, 100, 1001, 0, 0, 0, 10)
    assert figures(start, end)["busy_fraction_other"] is not None
    still = stat_file(tmp_path, "t", "100 0 100 1000 0 0 0 10")  # no tick ever: it gives up
    assert figures(start, load.closing_sample(start, still, wait_s=0.01))["busy_fraction_other"] is None
