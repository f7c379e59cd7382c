"""Arms that ran under different contention, in a claim's verdict.

- Each run records the share of the CPU taken from it while it ran: by other processes
  (`runs.busy_fraction_other`) and by the hypervisor (`runs.steal_fraction`, a VM's
  steal). Arms of a round run one after another, so a tenant that comes and goes can
  load one arm and not the other: on shared machines the difference in other processes'
  share between a pair's arms tracked the log ratio of their speeds (correlation -0.93
  over 48 A/A pairs), and a directional claim between identical arms passed on it; on a
  machine with nothing else running, steal alone reached a third of some runs' time. No
  interval can see such a bias when it repeats in every round.
- A claim comparing arms of a cell (same chip and concurrency) fails, naming the arms and
  their shares, when the mean over their common rounds of the difference of the two
  arms' shares exceeds CONTENTION_GAP: the measurement cannot tell the arms' speeds from
  the machine's. A single-arm figure keeps the table's "busy" mark instead.
- A server runtime's own work runs in another process, so its share is not contention:
  its runs are not read (`Reader.contention`).
This module neither queries nor renders.
"""

from __future__ import annotations

import dataclasses
from itertools import combinations

from runner.publish.stats.claims import Verdict

CONTENTION_GAP = 0.10  # of the whole CPU; one busy core of two is 0.5


def contention_gap(cells, busy: dict) -> tuple[float, str, str, int, float, float] | None:
    """The pair of arms in `cells` ((experiment, chip, arm, c) or (chip, arm, c)) sharing a
    chip and concurrency whose mean paired difference in the CPU share taken from them is
    largest: (gap, arm, other, concurrency, arm's mean share, other's); None when no pair
    has a round in common."""
    by_cell: dict[tuple[str, int], set[str]] = {}
    for cell in cells:
        chip, arm, conc = cell[-3:]
        by_cell.setdefault((chip, conc), set()).add(arm)
    worst = None
    for (chip, conc), arms in sorted(by_cell.items()):
        for a, b in combinations(sorted(arms), 2):
            sa, sb = busy.get((chip, a, conc), {}), busy.get((chip, b, conc), {})
            common = sorted(set(sa) & set(sb))
            if not common:
                continue
            mean_a = sum(sa[r] for r in common) / len(common)
            mean_b = sum(sb[r] for r in common) / len(common)
            gap = abs(mean_a - mean_b)
            if worst is None or gap > worst[0]:
                worst = (gap, a, b, conc, mean_a, mean_b)
    return worst


def judge_contention(verdict: Verdict, cells, busy: dict) -> Verdict:
    """A holding claim over arms whose contention differed by more than CONTENTION_GAP fails."""
    if not verdict.ok:
        return verdict
    worst = contention_gap(cells, busy)
    if worst is None or worst[0] <= CONTENTION_GAP:
        return verdict
    _, a, b, conc, share_a, share_b = worst
    return dataclasses.replace(
        verdict,
        ok=False,
        reason=(
            f"the arms ran under different contention: other processes and the hypervisor's steal "
            f"took {share_a:.0%} of the CPU during {a} and {share_b:.0%} during {b} at concurrency "
            f"{conc} (mean over rounds, more than {CONTENTION_GAP:.0%} apart), so the machine's "
            "load and the arms' speeds cannot be told apart; re-measure on a quieter machine"
        ),
    )
