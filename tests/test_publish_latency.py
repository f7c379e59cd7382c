"""Per-token latency on a page: ITL percentiles, the longest stall, labelled requests,
goodput under a declared SLO and the timeline chart, from a database written through the
store with a stall placed where a long prefill would put it."""

import re
from datetime import datetime

import pytest
from fixture_db import FixtureChip

from runner.publish.site.post import render_post
from runner.store.cell import CellRecord
from runner.store.store import Store

CHIP = FixtureChip("Fixture M1", 100.0)
STALL_MS = 400


def _run(st, chip_id, arm, conc, rnd, stall: bool, day):
    """lane 0: one 'long' request; lanes 1..: 'short' ones decoding 40 tokens 5 ms apart,
    each frozen for STALL_MS once when `stall` (the long prompt's one-pass prefill)."""
    run = st.begin_run(
        CellRecord(
            experiment="hol-fixture",
            declaration_sha256="h" * 64,
            arm=arm,
            concurrency=conc,
            round=rnd,
            seed=0,
            quick=False,
            slo_ttft_ms=500.0,
            slo_tpot_ms=10.0,
        ),
        chip_id=chip_id,
        model_sha256="m" * 64,
        code_version="abc1234",
        knobs={"prefill_chunk": 2048 if stall else 64},
        started_at=day.replace(hour=8, minute=rnd),
    )
    reqs, times = [], {}
    for lane in range(conc):
        label = "long" if lane == 0 else "short"
        n = 8 if label == "long" else 40
        first = (300 if stall else 120) * 1_000_000 if label == "long" else 10_000_000 + lane * 1_000_000
        ts, t = [], first
        for i in range(n):
            if i:
                t += 5_000_000 + (STALL_MS * 1_000_000 if stall and label == "short" and i == 10 else 0)
                t += (rnd * 7 + i * 13 + lane) % 3 * 100_000  # a little seeded noise
            ts.append(t)
        reqs.append(
            {
                "request_id": lane,
                "client": lane,
                "prompt_tokens": 1600 if label == "long" else 48,
                "output_tokens": n,
                "cached_tokens": 0,
                "arrival_ns": 0 if label == "short" else 5_000_000,
                "first_token_ns": ts[0],
                "done_ns": ts[-1],
                "output_sha256": f"{lane:064x}",
                "label": label,
            }
        )
        times[lane] = ts
    st.append_requests(run, reqs)
    st.append_tokens(run, times)
    st.finish_run(run, "complete", finished_at=day.replace(hour=9))


@pytest.fixture(scope="module")
def hol_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("hol") / "runs.duckdb"
    day = datetime(2026, 11, 19)
    with Store.open(db) as st:
        chip_id = st.ensure_chip(CHIP.fingerprint(), CHIP.machine_class())
        for rnd in range(3):
            for conc in (1, 4):
                for arm, stall in (("no-chunk", True), ("chunk-64", False)):
                    _run(st, chip_id, arm, conc, rnd, stall, day)
    return db


BODY = """# Stalls

{{ claim("405 ms", metric("stall_max_ms", arm="no-chunk", concurrency=4, requests="short")) }}
{{ claim("-99%", gain("stall_max_ms", arm="chunk-64", base="no-chunk", concurrency=4, requests="short")) }}
{{ claim("level", gain("itl_p50_ms", arm="chunk-64", base="no-chunk", concurrency=4, requests="short")) }}
{{ claim("-61%", gain("ttft_p50_ms", arm="chunk-64", base="no-chunk", concurrency=1, requests="long")) }}
{{ claim("+5%", gain("itl_p99_ms", arm="chunk-64", base="no-chunk", concurrency=4)) }}

{{ regime_table(["itl_p50_ms", "itl_p99_ms", "stall_max_ms", "goodput_rps"], requests="short") }}

{{ timeline_chart(concurrency=4, round=1) }}
"""


def test_stalls_percentiles_labels_and_goodput(hol_db):
    post = render_post(BODY, {"experiment": "hol-fixture", "date": "2026-11-20"}, key="p.md", db_path=hol_db)
    v = post.verdicts
    assert [x.ok for x in v[:4]] == [True, True, True, True], [
        (x.stated, x.measured.text(), x.reason) for x in v
    ]
    assert "its 'short' requests" in v[0].measured.what
    assert v[0].measured.lo is not None and 400 < v[0].measured.lo <= v[0].measured.hi < 410  # the stall
    assert not v[4].ok and v[4].measured.value < -0.9  # every request's p99 gap: the stalls are in it
    html = "".join(post.blocks.values())
    assert "The <code>short</code> requests only." in html
    rows = re.findall(r'data-arm="([^"]+)" data-concurrency="(\d)">(.*?)</tr>', html, re.S)
    assert {(a, c) for a, c, _ in rows} == {(a, c) for a in ("no-chunk", "chunk-64") for c in "14"}
    for arm, conc, cells in rows:  # no short request runs alone: their c=1 cells are empty
        assert (cells.count("&ndash;") == 4) == (conc == "1"), (arm, conc, cells)
    assert '"name":"short 1"' in html and '"name":"long 0"' in html  # one line per request
    assert [f.line for f in post.failures] == [7], [f.message for f in post.failures]  # the +5% only


def test_goodput_counts_requests_meeting_both_limits(hol_db):
    body = (
        '# G\n\n{{ claim("0", metric("goodput_rps", arm="no-chunk", concurrency=4, requests="short")) }} '
        '{{ claim("14", metric("goodput_rps", arm="chunk-64", concurrency=4, requests="short")) }}'
    )
    post = render_post(body, {"experiment": "hol-fixture"}, key="g.md", db_path=hol_db)
    stalled, chunked = post.verdicts
    # no-chunk: the stall makes each short request's mean time a token ~15 ms, over the
    # 10 ms limit; chunk-64: all 3 meet both limits within ~0.21 s from the first arrival
    assert stalled.ok and stalled.measured.value == 0.0
    assert chunked.measured.value == pytest.approx(3 / 0.212, rel=0.03)


def test_a_timeline_without_token_times_is_one_clear_failure(tmp_path):
    db = tmp_path / "notimes.duckdb"
    with Store.open(db) as st:
        chip_id = st.ensure_chip(CHIP.fingerprint(), CHIP.machine_class())
        for conc in (1, 4):
            run = st.begin_run(
                CellRecord(
                    experiment="x",
                    declaration_sha256="h" * 64,
                    arm="a",
                    concurrency=conc,
                    round=0,
                    seed=0,
                    quick=False,
                ),
                chip_id=chip_id,
                model_sha256="m" * 64,
                code_version="c",
                knobs={},
                started_at=datetime(2026, 11, 19, 8),
            )
            st.append_requests(
                run,
                [
                    {
                        "request_id": 0,
                        "client": 0,
                        "prompt_tokens": 4,
                        "output_tokens": 3,
                        "cached_tokens": 0,
                        "arrival_ns": 0,
                        "first_token_ns": 10,
                        "done_ns": 30,
                        "output_sha256": "0" * 64,
                    }
                ],
            )
            st.finish_run(run, "complete", finished_at=datetime(2026, 11, 19, 9))
    post = render_post(
        "# T\n\n{{ timeline_chart() }}\n{{ metric('itl_p99_ms', arm='a', concurrency=4) }}\n",
        {"experiment": "x"},
        key="t.md",
        db_path=db,
    )
    assert [f.message for f in post.failures] == [
        "timeline_chart: no per-token times for concurrency 4, round 0 on Fixture M1 (a runtime "
        "without token times, or no tokens table)"
    ]
    assert "not measured" in post.markdown
