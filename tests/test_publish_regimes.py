"""Regime completeness: batch 1 and the ceiling for every chip and arm, every gap listed."""

from runner.publish.sql.rows import CellKey
from runner.publish.stats.regimes import check_regimes


def test_every_missing_batch1_and_ceiling_cell_is_a_gap():
    layout = [CellKey(chip, arm, c) for chip in ("a", "b") for arm in ("off", "on") for c in (1, 2, 8)]
    measured = set(layout) - {("b", "on", 8), ("a", "off", 1), ("a", "off", 2)}
    reg = check_regimes(layout, measured, ["a", "b"], {"a": "Chip A", "b": "Chip B"})
    assert reg.ceiling == 8 and reg.concurrencies == (1, 2, 8) and reg.arms == ("off", "on")
    assert [g.describe() for g in reg.gaps] == [
        "chip 'Chip A' arm 'off' has no complete run at batch 1 (concurrency 1)",
        "chip 'Chip B' arm 'on' has no complete run at ceiling (concurrency 8)",
    ]
    assert reg.regime_of(1) == "batch 1" and reg.regime_of(8) == "ceiling" and reg.regime_of(2) == ""


def test_a_chip_missing_an_arm_entirely_is_listed_for_both_regimes():
    layout = [
        CellKey(*cell)
        for cell in [
            ("a", "off", 1),
            ("a", "off", 4),
            ("a", "on", 1),
            ("a", "on", 4),
            ("b", "off", 1),
            ("b", "off", 4),
        ]
    ]
    reg = check_regimes(layout, set(layout), ["a", "b"], {})
    assert [(g.chip_id, g.arm, g.regime) for g in reg.gaps] == [
        ("b", "on", "batch 1"),
        ("b", "on", "ceiling"),
    ]
