"""Arms that ran under different contention: a claim comparing them fails with that
reason, naming the arms and their shares of the CPU; a gap within the tolerance, or a
server arm (whose own work is another process's), lets it stand (real mkdocs builds)."""

from __future__ import annotations

import pytest
from fixture_db import edited_fixture
from publish_project import build_site, post_text, write_project

from runner.publish.stats.claims import Verdict
from runner.publish.stats.contention import CONTENTION_GAP, contention_gap, judge_contention

CELL = "r.arm = '{arm}' AND r.concurrency = 1 AND c.name = 'Fixture M1'"


def contended_fixture(
    db, off_share: float, runtime_of_off: str | None = None, column: str = "busy_fraction_other"
) -> None:
    """The fixture with every run's busy share 0.02 and no steal, except arm "off" at
    concurrency 1 on Fixture M1 (the claim's base), whose runs lost `off_share` (in
    `column`: other processes, or the hypervisor's steal)."""
    with edited_fixture(db) as con:
        con.execute("UPDATE runs SET busy_fraction_other = 0.02, steal_fraction = 0.0")
        where = CELL.format(arm="off")
        ids = f"SELECT r.run_id FROM runs r JOIN chips c USING (chip_id) WHERE {where}"
        con.execute(f"UPDATE runs SET {column} = {off_share} WHERE run_id IN ({ids})")
        if runtime_of_off:
            con.execute(f"UPDATE runs SET runtime = '{runtime_of_off}' WHERE run_id IN ({ids})")
        n = con.execute(f"SELECT count(*) FROM runs WHERE {column} = {off_share}").fetchall()[0][0]
    assert n >= 2  # every round of the base cell


@pytest.mark.parametrize("column", ["busy_fraction_other", "steal_fraction"])
def test_a_claim_over_unequally_contended_arms_fails_naming_them(tmp_path, column):
    db = tmp_path / "busy.duckdb"
    contended_fixture(db, 0.40, column=column)
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    result = build_site(config)
    assert not result.ok
    claim = [w for w in result.warnings if "stated '+25%'" in w]
    assert len(claim) == 1 and "blog/posts/p.md:10: claim 1" in claim[0]
    assert "different contention" in claim[0]
    off, on = (40, 2) if column == "busy_fraction_other" else (42, 2)  # steal adds to the 0.02 busy
    assert f"took {off}% of the CPU during off and {on}% during on at concurrency 1" in claim[0]


@pytest.mark.parametrize("share, runtime", [(0.02 + CONTENTION_GAP * 0.9, None), (0.40, "mlx-lm-server")])
def test_a_small_gap_or_a_server_arm_lets_the_claim_stand(tmp_path, share, runtime):
    db = tmp_path / "quiet.duckdb"
    contended_fixture(db, share, runtime)
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    assert build_site(config).ok


def test_the_gap_is_the_worst_pair_of_a_cell_over_common_rounds():
    busy = {
        ("m", "a", 1): {0: 0.0, 1: 0.1, 2: 0.9},
        ("m", "b", 1): {0: 0.2, 1: 0.3},  # round 2 unmeasured: a's 0.9 is not compared
        ("m", "c", 2): {0: 0.9},  # another concurrency: no pair
    }
    gap, a, b, conc, share_a, share_b = contention_gap({("m", "a", 1), ("m", "b", 1), ("m", "c", 2)}, busy)
    assert (a, b, conc) == ("a", "b", 1)
    assert (gap, share_a, share_b) == (pytest.approx(0.2), pytest.approx(0.05), pytest.approx(0.25))
    assert contention_gap({("m", "a", 1)}, busy) is None
    failed = Verdict(1, "+1%", None, ok=False, reason="already failed", line=None)
    assert judge_contention(failed, {("m", "a", 1), ("m", "b", 1)}, busy) is failed
