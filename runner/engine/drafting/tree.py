"""Draft trees at one sequence: a lone greedy row verifies its block drafter's chain plus
the drafter's second choice at the first positions, in one pass.

- Why one row only: a branch spends verify tokens on a sibling only one of which can
  land; with other rows in the pass, those tokens buy more as their drafts.
- Shape: node 0 is the row's last committed token (fed as always), nodes 1..m the chain
  d_1..d_m, each the child of the one before, then up to `draft_tree` leaves: the
  drafter's second choice at depth j (j <= TREE_DEPTH), a sibling of d_j. The chain is
  always whole in the tree and siblings differ, so a tree never accepts less than its
  chain would.
- Price (adaptive): a tree of n nodes feeds as many tokens as a chain of n drafts, and is
  priced as such a pass (costs interpolated between measured draft lengths). A leaf at
  depth j adds one token when every chain draft before it landed and its own token is the
  target's: the calibrated chance of the first times that of its q. Leaves join, best
  first, while expected tokens per unit of pass time grows. A fixed policy adds them all.
- Layout (`tree_layout`): node i writes the row's slot start + i and sits at position
  start + its depth; its attention group reads the row's context and its ancestors.
- Verification walks from the root along the child whose token the target chose at the
  node; a path that ends on a leaf leaves that leaf's keys and values one slot past its
  depth's, and the engine moves them there (`moves`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import mlx.core as mx
import numpy as np

from ..layout import PassContext, PassLayout, RowGroup, block_bucket, block_tables
from .row_lengths import ConfidenceCalibration

TREE_DEPTH = 2  # the first positions whose second choice may branch


def second_choices(logits: np.ndarray, drafts: list[int]) -> list[tuple[int, float]]:
    """(depth, V) draft logits of a row's first positions and its greedy drafts -> at each
    position the most likely token other than the draft, with its q."""
    out = []
    for row, draft in zip(logits, drafts):
        p = np.exp(row - row.max())
        p /= p.sum()
        p[draft] = -1.0
        alt = int(np.argmax(p))
        out.append((alt, float(p[alt])))
    return out


def cost_of(costs: dict[int, float], n: int) -> Optional[float]:
    """A pass feeding n drafts, priced from the measured lengths around n (linearly; past
    the longest, along the slope of the last two). None: too few measured."""
    if n in costs:
        return costs[n]
    below = sorted(m for m in costs if m < n)
    above = sorted(m for m in costs if m > n)
    if above and below:
        lo, hi = below[-1], above[0]
        return costs[lo] + (costs[hi] - costs[lo]) * (n - lo) / (hi - lo)
    if len(below) >= 2:
        lo, hi = below[-2], below[-1]
        return costs[hi] + (costs[hi] - costs[lo]) * (n - hi) / (hi - lo)
    return None


class TreePlan(NamedTuple):
    leaves: list[int]  # depths whose second choice joins as a leaf, best first
    reason: str  # why, in a few words ('' under a fixed policy)


def plan_leaves(
    calibration: ConfidenceCalibration,
    confidences: list[float],
    alternatives: list[tuple[int, float]],
    most: int,
    costs: Optional[dict[int, float]],
) -> TreePlan:
    """Which second choices join a chain of len(confidences) drafts (at most `most`);
    costs: pass cost by drafts fed, relative (None: a fixed policy, every leaf joins)."""
    m = len(confidences)
    reach, values = 1.0, []
    for j, (_, q) in enumerate(alternatives[: min(m, TREE_DEPTH)], start=1):
        values.append((reach * calibration.p(q), j))
        reach *= calibration.p(confidences[j - 1])
    values.sort(reverse=True)
    if costs is None:
        return TreePlan([j for _, j in values[:most]], "")
    base, best, best_rate = calibration.expected(confidences, m), 0, -1.0
    for e in range(min(most, len(values)) + 1):
        cost = cost_of(costs, m + e)
        if cost is None or cost <= 0:
            break
        rate = (base + sum(v for v, _ in values[:e])) / cost
        if rate > best_rate:
            best, best_rate = e, rate
    if not values:
        return TreePlan([], "")
    shown = ", ".join(f"depth {j} {v:.2f}" for v, j in values)
    return TreePlan([j for _, j in values[:best]], f"tree: {best} leaves (leaf tokens expected: {shown})")


def grow(
    drafts: list[int], alternatives: list[tuple[int, float]], leaves: list[int]
) -> tuple[list[int], list[int]]:
    """The chain's drafts with the leaves at `leaves` depths added -> (tokens, parents):
    node i (1-based) feeds tokens[i - 1] and hangs from node parents[i - 1] (0: the root)."""
    tokens = list(drafts) + [alternatives[j - 1][0] for j in leaves]
    parents = list(range(len(drafts))) + [j - 1 for j in leaves]
    return tokens, parents


def chain_of(tokens: list[int], parents: list[int]) -> list[int]:
    """A tree's chain alone (its leaves dropped); a chain as it is."""
    m = next((i for i, p in enumerate(parents) if p != i), len(parents))
    return tokens[:m] if parents else tokens


def walk(tokens: list[int], parents: list[int], greedy: list[int]) -> list[int]:
    """The accepted path, as node indices from depth 1: at each node, the child whose
    token is the target's choice there (greedy[i]: its argmax at node i; siblings with one
    token: the earlier node, the chain's, wins)."""
    children: dict[int, dict[int, int]] = {}
    for i, (tok, parent) in enumerate(zip(tokens, parents), start=1):
        children.setdefault(parent, {}).setdefault(tok, i)
    path, node = [], 0
    while (nxt := children.get(node, {}).get(greedy[node])) is not None:
        path.append(nxt)
        node = nxt
    return path


def ancestors(parents: list[int]) -> np.ndarray:
    """(T, T) bool, T = 1 + nodes: node j is node i or one of its ancestors."""
    up = [-1] + list(parents)
    seen = np.zeros((len(up), len(up)), bool)
    for i in range(len(up)):
        j = i
        while j >= 0:
            seen[i, j] = True
            j = up[j]
    return seen


def depths(parents: list[int]) -> list[int]:
    """Each node's depth, root (0) first."""
    d = [0]
    for parent in parents:
        d.append(d[parent] + 1)
    return d


def moves(path: list[int]) -> list[tuple[int, int]]:
    """(from node, to depth) for each accepted node whose keys sit past its depth's slot."""
    return [(node, depth) for depth, node in enumerate(path, start=1) if node != depth]


def tree_layout(start: int, parents: list[int], blocks: list[int], block_size: int) -> PassLayout:
    """One row feeding a draft tree from position `start`: node i sits in the row's slot
    start + i and at position start + its depth, and sees the row's context and its own
    ancestors."""
    T = 1 + len(parents)
    tables = block_tables([blocks], block_bucket(-(-(start + T) // block_size)))
    positions = [start + d for d in depths(parents)]
    slots = [tables[0][p // block_size] * block_size + p % block_size for p in range(start, start + T)]
    group = RowGroup(
        None,
        mx.array(tables, dtype=mx.int32),
        mx.array([start], dtype=mx.int32),
        T,
        block_size,
        tree=mx.array(ancestors(parents)[None]),
    )
    ctx = PassContext(
        positions=mx.array(positions, dtype=mx.int32),
        write_slots=mx.array(slots, dtype=mx.int32),
        groups=(group,),
        from_rows=None,
    )
    return PassLayout(ctx, [0], T)
