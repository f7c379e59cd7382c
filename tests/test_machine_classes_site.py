"""The issue-38 bar, simulated: the block-drafting experiment re-measured on another Intel
Xeon VM (another fingerprint, its CPU named with the clock appended, a few MB more memory)
and its measurement folder copied into a fresh copy of the reports. The site builds
strictly; the new VM adds no tab (it is an instance of "Intel Xeon, 2 cores", its rounds
pooled with the first Xeon VM's): block-drafting keeps its two classes (its Xeon data and
its re-measurement on an AMD EPYC), the flagship its two (AMD EPYC and Intel Xeon), and
the provenance lists both Xeon instances with their hashes.

The copy is the committed folder with its chip rewritten, its runs given new ids and a
later start, and every time 1.3x longer (a slower VM of the same type; gains unchanged):
real rows, a real load, a real mkdocs build."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from publish_project import build_site

from runner.store.machine_class import of_fingerprint

REPO = Path(__file__).resolve().parents[1]
SOURCE = "20261201T235601Z-fdde7b9b-block-drafting-399b6e80"
XEON = "Intel Xeon, 2 cores"
SLOWER = {
    "requests": ("arrival_ns", "first_token_ns", "done_ns"),
    "tokens": ("t_ns",),
    "passes": ("start_ns", "duration_ns"),
}


def _other_vm(fingerprint: dict) -> dict:
    return {**fingerprint, "name": "Intel(R) Xeon(R) Processor @ 2.80GHz", "memory_bytes": 25276747776}


def _copy_as_other_vm(source: Path, root: Path) -> tuple[Path, str]:
    """The folder re-measured on another VM two days later; returns it and its chip id."""
    tables = {
        t: pq.read_table(source / f"{t}.parquet") for t in ("chips", "runs", "requests", "passes", "tokens")
    }
    fingerprint = _other_vm(json.loads(tables["chips"].column("fingerprint")[0].as_py()))
    chip_id = hashlib.sha256(
        json.dumps(fingerprint, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    chip_id = chip_id[:16]
    chips = tables["chips"]
    for name, value in (
        ("chip_id", chip_id),
        ("name", fingerprint["name"]),
        ("memory_bytes", fingerprint["memory_bytes"]),
        ("os", "Linux-6.18.44-fc-v901-x86_64-with-glibc2.36"),
        ("fingerprint", json.dumps(fingerprint, sort_keys=True)),
    ):
        i = chips.schema.get_field_index(name)
        chips = chips.set_column(i, chips.schema.field(i), pa.array([value], chips.schema.field(i).type))
    tables["chips"] = chips
    new_id = {
        r: hashlib.sha256(f"vm2{r}".encode()).hexdigest()[:32]
        for r in tables["runs"].column("run_id").to_pylist()
    }
    for t in ("runs", "requests", "passes", "tokens"):
        ids = pa.array([new_id[r] for r in tables[t].column("run_id").to_pylist()], pa.string())
        tables[t] = tables[t].set_column(tables[t].schema.get_field_index("run_id"), "run_id", ids)
    for t, columns in SLOWER.items():  # the other VM is 1.3x slower at everything
        for col in columns:
            i = tables[t].schema.get_field_index(col)
            slow = pc.cast(
                pc.round(pc.multiply(pc.cast(tables[t].column(col), pa.float64()), 1.3)), pa.int64()
            )
            tables[t] = tables[t].set_column(i, tables[t].schema.field(i), slow)
    runs = tables["runs"]
    runs = runs.set_column(
        runs.schema.get_field_index("chip_id"), "chip_id", pa.array([chip_id] * runs.num_rows)
    )
    for col in ("started_at", "finished_at"):
        i = runs.schema.get_field_index(col)
        runs = runs.set_column(
            i, runs.schema.field(i), pc.add(runs.column(col), pa.scalar(timedelta(days=2)))
        )
    tables["runs"] = runs
    folder = root / f"20261203T235601Z-{chip_id[:8]}-block-drafting-{hashlib.sha256(b'vm2').hexdigest()[:8]}"
    folder.mkdir()
    for t, table in tables.items():
        pq.write_table(table, folder / f"{t}.parquet")
    return folder, chip_id


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    root = tmp_path_factory.mktemp("clone")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(REPO / "reports", root / "reports", ignore=shutil.ignore_patterns("*.duckdb", "*.wal"))
    measurements = root / "reports" / "data" / "measurements"
    _, chip_id = _copy_as_other_vm(measurements / SOURCE, measurements)
    result = build_site(root / "mkdocs.yml", site=root / "site")
    assert result.ok, result.warnings
    return result.site, chip_id


def _tab_labels(html: str) -> list[list[str]]:
    """Each tab set's labels, in page order."""
    sets = re.findall(r'<div class="tabbed-set[^"]*"[^>]*>(.*?)<div class="tabbed-content', html, re.S)
    return [re.findall(r"<label[^>]*>([^<]+)</label>", s) for s in sets]


def _page(site: Path, slug: str) -> str:
    return next(site.glob(f"blog/20*/**/{slug}*/index.html")).read_text()


def test_the_other_vm_is_an_instance_of_the_home_vm_s_class():
    fingerprint = json.loads(
        pq.read_table(REPO / "reports/data/measurements" / SOURCE / "chips.parquet")["fingerprint"][0].as_py()
    )
    home, other = of_fingerprint(fingerprint), of_fingerprint(_other_vm(fingerprint))
    assert home == other and home.label == XEON


def test_another_xeon_vm_adds_no_tab_block_drafting_and_the_flagship_show_two_classes(fresh_clone):
    site, chip_id = fresh_clone
    drafting = _page(site, "block-drafting")
    # its Xeon data (now two instances) and its re-measurement on an AMD EPYC: two classes,
    # never a tab for the new VM
    assert {tuple(s) for s in _tab_labels(drafting)} == {("AMD EPYC, 2 cores (home)", XEON)}
    assert "@ 2.80GHz" not in drafting.split('id="provenance"')[0]
    flagship = _page(site, "speculative-decoding")
    labels = {tuple(s) for s in _tab_labels(flagship)}
    assert labels == {("AMD EPYC, 2 cores (home)", XEON)}, labels


def test_the_provenance_lists_the_class_s_instances_with_their_hashes(fresh_clone):
    site, chip_id = fresh_clone
    drafting = _page(site, "block-drafting")
    provenance = drafting[drafting.index('id="provenance"') :]
    lines = re.findall(
        rf"<li>Machine probe on {XEON}, instance ([0-9a-f]{{8}}) \(runs from [\d-]+, (\d+) runs\)", provenance
    )
    assert (chip_id[:8], "84") in lines and any(i == "fdde7b9b" for i, _ in lines), lines


def test_the_re_measurement_s_note_says_what_the_pooled_evidence_does(fresh_clone):
    site, _ = fresh_clone
    drafting = _page(site, "block-drafting")
    notes = re.findall(r"Update 2026-12-04 \(automatic\)</strong>: (.*?)</p>", drafting)
    assert len(notes) == 1 and XEON in notes[0], notes
    pooled = re.findall(r'data-clause="pooled">(.*?)</span>', notes[0])
    assert pooled == ["on 2 instances, 6 rounds"], notes[0]


def test_absolute_figures_show_the_instances_spread_never_a_pooled_mean(fresh_clone):
    site, _ = fresh_clone
    drafting = _page(site, "block-drafting")
    cells = re.findall(
        r'<td>(\d+\.\d)\u2013(\d+\.\d)<br><small class="bothrows-interval">2 instances</small>', drafting
    )
    assert cells and all(float(lo) < float(hi) for lo, hi in cells), cells
    # the tiny model's decode figures were re-measured; the deep model's (one instance) were not
    assert re.search(
        r'<td>\d+\.\d<br><small class="bothrows-interval">\d+\.\d\u2013\d+\.\d</small>', drafting
    )
