"""`[workload] aa = true`: the base arm's copy measured in every round, like any arm."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.experiments.declaration import DeclarationError, parse
from runner.experiments.execute import plan_cells

EXAMPLE = (Path(__file__).resolve().parents[1] / "reports" / "experiments" / "example.toml").read_text()


def _with_aa(text: str, value: str = "true") -> bytes:
    return text.replace("shared_prefix_tokens = 0", f"shared_prefix_tokens = 0\naa = {value}").encode()


def test_aa_adds_exactly_the_base_arm_s_copy_and_its_cells():
    plain, with_aa = parse(EXAMPLE.encode(), "x.toml", "x"), parse(_with_aa(EXAMPLE), "x.toml", "x")
    assert list(with_aa.arms) == [*plain.arms, "off-aa"]
    assert with_aa.arms["off-aa"] == with_aa.arms["off"] and with_aa.aa_copy == "off-aa"
    cells, before = plan_cells(with_aa), plan_cells(plain)
    copies = [c for c in cells if c.arm == "off-aa"]
    assert len(cells) == len(before) + len(copies) == len(before) * 3 // 2
    assert {(c.concurrency, c.round) for c in copies} == {(c.concurrency, c.round) for c in before}
    assert with_aa.sha256 != plain.sha256  # new cells, as for any edit
    again = parse(with_aa.to_toml().encode(), "y.toml", "x")
    assert list(again.arms) == list(with_aa.arms) and again.workload.aa


def test_aa_must_be_true_or_false_and_its_copy_must_not_exist_yet():
    with pytest.raises(DeclarationError, match=r"workload\.aa.*true or false"):
        parse(_with_aa(EXAMPLE, '"yes"'), "x.toml", "x")
    clash = _with_aa(EXAMPLE).decode() + "\n[arms.off-aa]\nmtp = false\n"
    with pytest.raises(DeclarationError, match=r"workload\.aa.*'off-aa'"):
        parse(clash.encode(), "x.toml", "x")
