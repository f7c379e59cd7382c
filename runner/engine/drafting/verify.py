"""Committing one landed pass: every row's tokens chosen, committed, and its verified
length set.

- A prefill chunk short of the prompt's end commits nothing; it only advances `computed`.
- A drafting row keeps its accepted drafts plus one target token (speculative.choose),
  under the stop rules; its verified length is its start + 1 + accepted. That is the
  rollback of rejected positions: the paged KV and the indexer keys past it are simply
  overwritten later, and the drafter forgets its own state past it.
- `accepted_lengths[m]` counts the drafting rows that kept m drafts in this pass and
  `draft_lengths[k]` those that carried k (rows may carry different k): the histograms
  pages read accepted length and acceptance by position from.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional

import mlx.core as mx
import numpy as np

from ..passes import Landed, Launched
from ..sequence import Sequence
from .drafter import Drafter
from .speculative import Choice, choose, commit
from .tree import chain_of, moves, walk


class PassCommit(NamedTuple):
    emitted: int  # tokens committed to outputs
    accepted: int  # drafts kept
    accepted_lengths: tuple[int, ...]  # [m]: drafting rows that kept m drafts (empty: none drafted)
    draft_lengths: tuple[int, ...]  # [k]: drafting rows that carried k drafts (empty: none drafted)
    outcomes: tuple = ()  # (the drafter's confidences, chain drafts kept) of each row that had them
    drafter_lengths: tuple[int, ...] = ()  # accepted_lengths over the drafter's rows (no lookups)
    branched: int = 0  # rows whose draft tree landed a leaf beyond its chain


def commit_pass(
    cur: Launched,
    out: Landed,
    eos: frozenset[int],
    drafter: Optional[Drafter],
    move_keys: Optional[Callable[[list[int], int, int], None]] = None,
) -> PassCommit:
    """move_keys(a row's blocks, from position, to position): carry a position's keys and
    values (a tree's accepted leaf) to another; needed only when rows verify draft trees."""
    plan, emitted, accepted, branched = cur.plan, 0, 0, 0
    hist = [0] * (1 + max(plan.drafted, default=0))
    carried = list(hist)
    by_drafter = list(hist)  # drafting rows carry one k a pass (PositionAcceptance.add)
    outcomes: list = []
    now = time.perf_counter_ns()  # every token this pass commits is stamped with it:
    # one clock read a pass, one int appended a token
    sampled = [b for b, s in enumerate(plan.rows) if s.temperature > 0]
    host_logits = dict(zip(sampled, np.array(cur.logits[mx.array(sampled)]))) if sampled else {}
    for b, seq in enumerate(plan.rows):
        if seq.finished:  # finished by the previous pass; a queued pass ran it anyway
            continue
        end, drafted = out.starts[b] + len(plan.feeds[b]), plan.drafted[b]
        if end < len(seq.tokens) and not drafted:
            seq.computed = end  # a prefill chunk that does not reach the prompt's end
            continue
        if seq.draft_parents:
            choice, chain_kept = _walk_tree(seq, out.greedy[b], out.starts[b], move_keys)
            branched += choice.accepted > chain_kept
        else:
            choice = choose(seq, out.greedy[b], host_logits.get(b), drafted)
            chain_kept = choice.accepted
        emitted += commit(seq, choice.tokens, eos, now)
        if drafted and seq.draft_conf:
            outcomes.append((seq.draft_conf[:drafted], chain_kept))
        looked_up = seq.drafts_looked_up
        seq.clear_drafts()  # verified
        if drafted:
            accepted += choice.accepted
            hist[choice.accepted] += 1
            carried[drafted] += 1
            if not looked_up:
                by_drafter[choice.accepted] += 1
            seq.computed = out.starts[b] + 1 + choice.accepted
            if drafter is not None:
                drafter.rollback(seq, seq.computed)
        else:
            seq.computed = end
    if not any(plan.drafted):
        return PassCommit(emitted, accepted, (), ())
    drafter_lengths = tuple(by_drafter) if any(by_drafter) else ()
    return PassCommit(
        emitted, accepted, tuple(hist), tuple(carried), tuple(outcomes), drafter_lengths, branched
    )


def _walk_tree(seq: Sequence, greedy: list[int], start: int, move_keys) -> tuple[Choice, int]:
    """A greedy row's draft tree verified (tree.py): its choice, and how many of its chain's
    drafts that choice kept. An accepted leaf's keys move to its depth's position, and the
    drafter is told which fed positions were verified (`Sequence.kept_nodes`)."""
    path = walk(seq.drafts, seq.draft_parents, greedy)
    m = len(chain_of(seq.drafts, seq.draft_parents))
    for node, depth in moves(path):
        move_keys(seq.blocks, start + node, start + depth)
    if moves(path):
        seq.kept_nodes = [0, *path]
    kept = [seq.drafts[i - 1] for i in path]
    return Choice(kept + [greedy[path[-1] if path else 0]], len(path)), sum(i <= m for i in path)
