"""Predicted figures on a page: crossover and predicted() claims judged by the strict
build, extrapolated widths labelled, the held-out check under the chart and from
`runner audit --predict`, and a runtime without per-pass rows named, never drawn."""

import random
import re
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixture_db import DECLARATION, DEFAULT_CHIPS, EXPERIMENT, MODEL, _run_rows, build_fixture, remeasure
from publish_project import build_site, dedent, write_project

from runner.publish.site.commands import main_audit
from runner.publish.sql.reader import Reader
from runner.publish.stats.predict import Models, measured_crossover
from runner.publish.stats.views import View
from runner.store.cell import CellRecord
from runner.store.store import Store

CHIP = DEFAULT_CHIPS[0]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """The fixture's off/on arms with passes, on one chip, plus arm 'served' on
    mlx-lm-server (requests only)."""
    path = tmp_path_factory.mktemp("predict") / "runs.duckdb"
    fx = build_fixture(path, chips=(CHIP,), passes_per_run=60, rounds=3)
    rng = random.Random(5)
    with Store.open(path) as st:
        for c in (1, 2, 4):
            for r in range(3):
                requests, _ = _run_rows(rng, CHIP, "off", c, 2, 0)
                cell = CellRecord(EXPERIMENT, DECLARATION, "served", c, r, 0, False, "mlx-lm-server")
                run = st.begin_run(
                    cell,
                    chip_id=fx.chip_ids[CHIP.name],
                    model_sha256=MODEL,
                    code_version="abc1234",
                    knobs={"runtime": "mlx-lm-server"},
                )
                st.append_requests(
                    run, [{**q, "cached_tokens": None, "output_sha256": None} for q in requests]
                )
                st.finish_run(run, "complete")
        m3 = st.ensure_chip(
            DEFAULT_CHIPS[1].fingerprint(), DEFAULT_CHIPS[1].machine_class()
        )  # a chip that measured on a server
        for arm in ("off", "on"):
            for c in (1, 2, 4):
                for r in range(3):
                    requests, _ = _run_rows(rng, DEFAULT_CHIPS[1], arm, c, 2, 0)
                    cell = CellRecord(EXPERIMENT, DECLARATION, arm, c, r, 0, False, "mlx-lm-server")
                    run = st.begin_run(
                        cell,
                        chip_id=m3,
                        model_sha256=MODEL,
                        code_version="abc1234",
                        knobs={"runtime": "mlx-lm-server"},
                    )
                    st.append_requests(run, requests)
                    st.finish_run(run, "complete")
    return path


def measured_crossing(db: Path) -> tuple[float, float, float]:
    with Reader(db) as reader:
        chip = reader.chips(EXPERIMENT, False)[0].chip_id
        view = View(reader, EXPERIMENT, False, None)
        x = measured_crossover(view, chip, "on", "off", (1, 2, 4))
    return x


POST = dedent("""\
    ---
    date: 2026-11-20
    experiment: {experiment}
    ---
    # Where drafting stops paying
    {{% set m1 = {{"chip": "Fixture M1"}} %}}

    It crosses at {{{{ claim("{stated}", crossover(arm="on", base="off", measured=True, **m1)) }}}}.
    At 12: {{{{ claim("{speed}", predicted("decode_tps", arm="on", concurrency=12, **m1)) }}}}.
    The server {{{{ claim("2.5", crossover(arm="served", base="off", **m1)) }}}}.
    Served {{{{ claim("80 tok/s", predicted("decode_tps", arm="served", concurrency=2, **m1)) }}}}.
    On M3 {{{{ claim("2.5", crossover(arm="on", base="off", chip="Fixture M3")) }}}}.

    {{{{ prediction_chart(arms=["on", "served"], base="off") }}}}
    """)


def predicted_speed(db: Path) -> float:
    with Reader(db) as reader:
        chip = reader.chips(EXPERIMENT, False)[0].chip_id
        return float(Models(reader, EXPERIMENT, False).fit(chip, "on").decode_tps()[0, 12])


def test_a_crossover_outside_its_interval_fails_the_strict_build_naming_the_interval(db, tmp_path):
    x = measured_crossing(db)
    assert x.value is not None and 2 < x.value < 4  # the fixture's "on" wins at 2, loses at 4
    assert x.lo is not None and x.lo <= x.value <= x.hi
    speed = f"{predicted_speed(db):.1f} tok/s"
    wrong = f"{x.hi + 0.5:.1f}"
    config = write_project(
        tmp_path, db, {"p.md": POST.format(experiment=EXPERIMENT, stated=wrong, speed=speed)}
    )
    strict = build_site(config)
    assert not strict.ok
    claims = [w for w in strict.warnings if "blog/posts/p.md" in w and "claim" in w]
    first = [w for w in claims if f"claim 1 stated '{wrong}'" in w]
    assert len(first) == 1, claims
    assert f"95% interval {x.lo:.1f} to {x.hi:.1f}" in first[0]
    assert "outside both the stated rounding and the 95% interval" in first[0]
    assert not [w for w in claims if "claim 2 " in w], claims  # the predicted speed holds
    served = [w for w in claims if re.search(r"claim [345] ", w)]
    assert len(served) == 3 and all(w.endswith("not measured by runtime mlx-lm-server") for w in served)

    right = f"{x.value:.1f}"
    config = write_project(
        tmp_path / "ok", db, {"p.md": POST.format(experiment=EXPERIMENT, stated=right, speed=speed)}
    )
    relaxed = build_site(config, strict=False, site=tmp_path / "relaxed")
    html = next(relaxed.site.glob("blog/20*/**/index.html")).read_text()
    assert "Predicted decode not measured by runtime mlx-lm-server (arm served)." in html
    for arm in ("off", "on"):  # passes on M1, none on M3
        assert f"Predicted decode on Fixture M3 not measured by runtime mlx-lm-server (arm {arm})." in html
    assert '"text":"extrapolated"' in html  # the shaded range beyond the ceiling
    assert "widths beyond the measured ceiling (4) are extrapolated" in html
    held = re.search(r'<details class="bothrows-held-out">.*?<p>(.*?)</p>', html, re.S).group(1)
    assert re.search(r"on: within \d+% \([+-]\d+% at 1, [+-]\d+% at 2, [+-]\d+% at 4\)", held), held
    assert re.search(
        r"on: within \d+% \([^)]*\); every arm&#39;s runs there left out too, within \d+%", held
    ), held
    names = set(re.findall(r'"name":"([^"]*)"', html))
    assert {"on predicted", "on measured", "off predicted"} <= names
    assert not any(n.startswith("served") for n in names)


def test_a_prediction_beyond_the_ceiling_says_extrapolated(db, tmp_path):
    config = write_project(
        tmp_path,
        db,
        {
            "p.md": dedent("""\
                ---
                date: 2026-11-20
                experiment: {e}
                ---
                # Far out
                {{% set m1 = {{"chip": "Fixture M1"}} %}}

                {{{{ claim("1 tok/s", predicted("decode_tps", arm="on", concurrency=12, **m1)) }}}}
                {{{{ claim("1 tok/s", predicted("decode_tps", arm="on", concurrency=2, **m1)) }}}}
                """).format(e=EXPERIMENT)
        },
    )
    strict = build_site(config)
    claims = sorted(w for w in strict.warnings if "claim" in w)
    assert len(claims) == 2
    assert "extrapolated beyond the measured ceiling 4" in claims[0]
    assert "extrapolated" not in claims[1]


def test_audit_predict_prints_a_held_out_error_for_every_concurrency(db, tmp_path, capsys):
    config = write_project(tmp_path, db, {})
    args = SimpleNamespace(config_file=str(config), database=str(db), aa=None, chip=None, predict=EXPERIMENT)
    code = main_audit(args)
    out = capsys.readouterr().out
    for arm in ("off", "on"):
        lines = out.split(f" {arm}: terms")[1].splitlines()[1:]
        block = "\n".join(
            line for line in lines[: next(i for i, x in enumerate(lines + ["x"]) if not x.startswith("    "))]
        )
        assert [
            int(c) for c in re.findall(r"concurrency (\d+): predicted [\d.]+ tok/s, measured", block)
        ] == [1, 2, 4]
    assert "served: not measured by runtime mlx-lm-server" in out
    assert re.search(r"Fixture M3 \(\w{8}\) on: not measured by runtime mlx-lm-server", out), out
    worst = float(re.search(r"largest testable held-out error ([\d.]+)%", out).group(1))
    assert code == (1 if worst > 20 else 0)


def test_a_held_out_error_above_20_percent_shows_a_warning_on_the_page(tmp_path):
    """`off` at concurrency 4 re-measured with its requests decoding twice as fast as its
    passes say: predicted from concurrencies 1 and 2, it misses by about half."""
    path = tmp_path / "runs.duckdb"
    build_fixture(path, chips=(CHIP,), passes_per_run=60)
    remeasure(path, CHIP, "off", 4, speedup=2.0, day=datetime(2026, 11, 21))
    post = dedent("""\
        ---
        date: 2026-11-20
        experiment: {e}
        ---
        # A poor fit

        {{{{ prediction_chart(arms=["on"], base="off") }}}}
        """).format(e=EXPERIMENT)
    config = write_project(tmp_path, path, {"p.md": post})
    result = build_site(config, site=tmp_path / "site")
    assert result.ok, result.warnings  # a warning on the page, not a failed build
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    warning = re.search(r'bothrows-prediction-warning"><p class="admonition-title">([^<]*)</p>', html)
    assert warning and warning.group(1) == "Held-out error above 20%: Fixture M1, off", html
    held = re.search(r'<details class="bothrows-held-out">.*?<p>(.*?)</p>', html, re.S).group(1)
    assert (
        re.search(r"off: within (\d+)%", held) and int(re.search(r"off: within (\d+)%", held).group(1)) > 20
    )
