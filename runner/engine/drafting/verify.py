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
from typing import NamedTuple, Optional

import mlx.core as mx
import numpy as np

from ..passes import Landed, Launched
from .drafter import Drafter
from .speculative import choose, commit


class PassCommit(NamedTuple):
    emitted: int  # tokens committed to outputs
    accepted: int  # drafts kept
    accepted_lengths: tuple[int, ...]  # [m]: drafting rows that kept m drafts (empty: none drafted)
    draft_lengths: tuple[int, ...]  # [k]: drafting rows that carried k drafts (empty: none drafted)
    outcomes: tuple = ()  # (the drafter's confidences, drafts kept) of each row that had them


def commit_pass(cur: Launched, out: Landed, eos: frozenset[int], drafter: Optional[Drafter]) -> PassCommit:
    plan, emitted, accepted = cur.plan, 0, 0
    hist = [0] * (1 + max(plan.drafted, default=0))
    carried = list(hist)
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
        choice = choose(seq, out.greedy[b], host_logits.get(b), drafted)
        emitted += commit(seq, choice.tokens, eos, now)
        if drafted and seq.draft_conf:
            outcomes.append((seq.draft_conf[:drafted], choice.accepted))
        seq.drafts, seq.draft_probs, seq.draft_conf = [], [], []  # verified
        if drafted:
            accepted += choice.accepted
            hist[choice.accepted] += 1
            carried[drafted] += 1
            seq.computed = out.starts[b] + 1 + choice.accepted
            if drafter is not None:
                drafter.rollback(seq, seq.computed)
        else:
            seq.computed = end
    if not any(plan.drafted):
        return PassCommit(emitted, accepted, (), ())
    return PassCommit(emitted, accepted, tuple(hist), tuple(carried), tuple(outcomes))
