"""Choosing an arm by traffic: a declared traffic profile (the share of busy time spent
at each concurrency) turns the per-concurrency decode speeds into an expected per-user
decode speed for each arm, and names the better arm and its margin, per chip.

expected(arm) = sum over c of share_c x decode_tps(arm, c), where decode_tps is the
per-sequence decode speed of the regime table. Its 95% interval comes from the same sum
formed round by round (`intervals.py`; a gain is paired by round). This module validates
profiles, computes these values and renders the `traffic.html` block; it
never reads the database except through `queries.Reader`.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from runner.publish.blocks.chiptabs import ChipPane, chip_tabs
from runner.publish.blocks.postdata import PostData
from runner.publish.blocks.tables import set_id
from runner.publish.blocks.templating import render_block
from runner.publish.sql import pages
from runner.publish.stats.claims import Measured
from runner.publish.stats.intervals import level, paired

METRIC = "decode_tps"
SHARE_TOLERANCE = 1e-6


class ProfileError(ValueError):
    """A traffic profile that cannot be used; the message says which entry and why."""


@dataclass(frozen=True, slots=True)
class Profile:
    shares: tuple[tuple[int, float], ...]  # (concurrency, share of busy time), ascending

    def describe(self) -> str:
        return ", ".join(f"{share:.0%} at {c}" for c, share in self.shares)


def parse_profile(profile: object, concurrencies: tuple[int, ...]) -> Profile:
    """{concurrency: share} -> Profile. Shares are fractions of busy time: each in [0, 1],
    summing to 1; every concurrency must be one the experiment measured."""
    if not isinstance(profile, dict) or not profile:
        raise ProfileError(
            f"a traffic profile is a non-empty mapping {{concurrency: share}}, got {profile!r}"
        )
    problems, shares = [], []
    for key, share in profile.items():
        conc = int(key) if isinstance(key, int) or (isinstance(key, str) and key.isdigit()) else None
        if conc is None or isinstance(key, bool):
            problems.append(f"key {key!r} is not a concurrency (a whole number)")
            continue
        if conc not in concurrencies:
            problems.append(
                f"concurrency {conc} was not measured (measured: {', '.join(map(str, concurrencies))})"
            )
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            problems.append(f"share {share!r} at concurrency {conc} must be a number in [0, 1]")
            continue
        shares.append((conc, float(share)))
    if not problems and abs(sum(s for _, s in shares) - 1) > SHARE_TOLERANCE:
        problems.append(f"shares must sum to 1, they sum to {sum(s for _, s in shares):.6g}")
    if problems:
        raise ProfileError("traffic profile " + "; ".join(problems))
    return Profile(tuple(sorted(shares)))


@dataclass(frozen=True, slots=True)
class Expected:
    """One arm's expected per-user decode speed on one chip under a profile."""

    chip_id: str
    arm: str
    mean: float | None  # from the cells' means (what the regime table shows)
    rounds: dict  # {round: the same sum over that round's values}
    n_rounds: int


def expected_speeds(data: PostData, profile: Profile, chip_id: str, view=None) -> list[Expected]:
    """Every arm's expected speed, from `view` (default: the newest data, as blocks show)."""
    view = view or data.now
    out = []
    for arm in data.arm_order:
        cells = [view.cells.get((chip_id, arm, c, METRIC)) for c, _ in profile.shares]
        mean = (
            sum(s * cell.mean for (_, s), cell in zip(profile.shares, cells))
            if all(cell is not None and cell.mean is not None for cell in cells)
            else None
        )
        rounds = view.intervals.weighted(METRIC, chip_id, arm, profile.shares) if mean is not None else {}
        out.append(Expected(chip_id, arm, mean, rounds, min((c.n_rounds for c in cells if c), default=0)))
    return out


def _profile(data: PostData, profile: object) -> Profile | None:
    try:
        return parse_profile(profile, data.regimes.concurrencies)
    except ProfileError as e:
        data.fail(str(e))
        return None


def _cells(chip_id: str, arms: tuple[str, ...], profile: Profile) -> set:
    return {(chip_id, a, c) for a in arms for c, _ in profile.shares}


def speed(data: PostData, profile: object, arm: str, chip: str | None, as_of: object = None) -> Measured:
    """An arm's expected per-user decode speed under the profile, claimable."""
    prof, chip_id, cutoff = _profile(data, profile), data.chip_for(chip), data.cutoff(as_of)
    what = (
        f"expected per-user decode_tps of {arm} under traffic "
        f"({prof.describe() if prof else profile}) on {data.label_of(chip_id, chip, cutoff)}"
    )
    if prof is None or chip_id is None or not data.arm_ok(arm):
        return data.values.measured(None, None, None, 0, "value", what, METRIC, set())
    e = next(
        x for x in expected_speeds(data, prof, chip_id, data.values.view(None, cutoff=cutoff)) if x.arm == arm
    )
    if e.mean is None:
        return data.values.measured(None, None, None, 0, "value", what, METRIC, set())
    est = level(e.mean, list(e.rounds.values()))
    return data.values.measured(
        est.value, est.lo, est.hi, est.n_rounds, "value", what, METRIC, _cells(chip_id, (arm,), prof)
    )


def gain(
    data: PostData, profile: object, arm: str, base: str | None, chip: str | None, as_of: object = None
) -> Measured:
    """arm's expected speed over base's, minus 1, under the profile; its interval from the
    rounds' own ratios (paired, as `gain()` is for one concurrency)."""
    base = data.base if base is None else base
    prof, chip_id, cutoff = _profile(data, profile), data.chip_for(chip), data.cutoff(as_of)
    what = (
        f"expected per-user decode_tps of {arm} vs {base} under traffic "
        f"({prof.describe() if prof else profile}) on {data.label_of(chip_id, chip, cutoff)}"
    )
    if prof is None or chip_id is None or not (data.arm_ok(arm) and data.arm_ok(base)):
        return data.values.measured(None, None, None, 0, "change", what, METRIC, set())
    by_arm = {x.arm: x for x in expected_speeds(data, prof, chip_id, data.values.view(None, cutoff=cutoff))}
    on, off = by_arm[arm], by_arm[base]
    if on.mean is None or not off.mean:
        return data.values.measured(None, None, None, 0, "change", what, METRIC, set())
    est = paired(on.mean / off.mean, on.rounds, off.rounds, "change")
    return data.values.measured(
        est.value, est.lo, est.hi, est.n_rounds, "change", what, METRIC, _cells(chip_id, (arm, base), prof)
    )


def best_arm(data: PostData, profile: object, chip: str | None, as_of: object = None) -> str:
    """The arm with the highest expected per-user decode speed ('' when not measured)."""
    prof, chip_id = _profile(data, profile), data.chip_for(chip)
    if prof is None or chip_id is None:
        return ""
    ranked = _ranked(expected_speeds(data, prof, chip_id, data.values.view(None, cutoff=data.cutoff(as_of))))
    return ranked[0].arm if ranked else ""


def _ranked(speeds: list[Expected]) -> list[Expected]:
    """Measured arms, fastest first; ties broken by arm name so pages are stable."""
    return sorted((e for e in speeds if e.mean is not None), key=lambda e: (-e.mean, e.arm))


def _row(e: Expected, base: Expected | None, best: Expected, runner_up: Expected | None) -> dict:
    est = level(e.mean, list(e.rounds.values())) if e.mean is not None else None
    vs_base = (e.mean / base.mean - 1) if base and base.mean and e.mean is not None else None
    margin = (e.mean / runner_up.mean - 1) if e is best and runner_up and runner_up.mean else None
    return {
        "arm": e.arm,
        "best": e is best,
        "value": "" if e.mean is None else f"{e.mean:,.1f}",
        "interval": f"{est.lo:,.1f}\u2013{est.hi:,.1f}" if est and est.lo is not None else "",
        "vs_base": "" if vs_base is None or e is base else f"{vs_base:+.1%}",
        "margin": "" if margin is None else f"{margin:+.1%}",
    }


def traffic(data: PostData, profile: object, label: str, base: str | None) -> Markup:
    """The block: per chip, each arm's expected per-user decode speed under the profile,
    its change over `base`, and the better arm with its margin over the runner-up."""
    base = data.base if base is None else base
    prof = _profile(data, profile)
    if base not in data.regimes.arms:
        data.fail(
            f"traffic: base arm {base!r} is not an arm of {data.experiment!r} "
            f"(arms: {', '.join(data.arm_order)})"
        )
    if prof is None:
        return data.token(render_block("block_error.html", message="traffic choice not shown"), "")
    sql_href = data.register_sql("traffic", pages.inline_sql(pages.RUN_VALUES_SQL, data.params))
    chips = []
    for chip_id in data.regimes.chips:
        speeds = expected_speeds(data, prof, chip_id)
        ranked = _ranked(speeds)
        if not ranked:
            data.fail(
                f"traffic {label!r}: no arm has decode_tps at every concurrency of the "
                f"profile on {data.chip_names.get(chip_id, chip_id)}"
            )
            continue
        best, runner_up = ranked[0], (ranked[1] if len(ranked) > 1 else None)
        base_e = next((e for e in speeds if e.arm == base), None)
        rows = [_row(e, base_e, best, runner_up) for e in speeds]
        chips.append(
            {
                "chip_id": chip_id,
                "name": data.chip_names.get(chip_id, chip_id),
                "best": best.arm,
                "runner_up": runner_up.arm if runner_up else "",
                "margin": next(r["margin"] for r in rows if r["best"]),
                "rows": rows,
            }
        )
    panes = [
        ChipPane(c["chip_id"], c["name"], render_block("traffic_chip.html", chip=c, base=base)) for c in chips
    ]
    html = render_block(
        "traffic.html",
        label=label,
        shares=[{"concurrency": c, "share": f"{s:.0%}"} for c, s in prof.shares],
        body=chip_tabs(panes, data.judging.chip_id, set_id(data, "traffic")) if panes else "",
        sql_href=sql_href,
    )
    return data.token(html, "")
