"""Rows in step: when the launcher keeps rows from drafting beside each other, and which
passes then run without the block drafter's features.

- Rows in step (more than one, each with as many tokens left, none waiting to join them)
  finish in the same pass if none drafts, and the prompts that follow them then prefill
  together. Drafting would set them apart: each later prompt would prefill in a pass the
  others wait on, and where none follows (the end of a workload, Engine.generate's batch)
  the batch waits for its last row, through passes of fewer rows that cost nearly as
  much. The adaptive policy (without held prompts) keeps them from it. Inside generate,
  drafting in step at four lost per batch though the rows' own mean rate rose (block-8
  and adaptive on unseen code, `runner bench --mtp`'s batch column).
- A pass of rows so kept, carrying no drafts, has no use for the drafter's features: none
  drafts after it while they stay in step. It runs the graph without them, and the
  drafter ends the rows' contexts (block_drafting.py); a row that may draft again later
  starts a new one. So the engine runs there the passes one without a drafter would.
"""

from __future__ import annotations


def in_step(rows, sched) -> bool:
    """Will the rows going on (and none waiting to join them) finish in one pass if none
    drafts: more than one, each with as many tokens left?"""
    if sched.waiting and sched.hold_from is None:
        return False
    left = [s.max_new_tokens - s.num_output for s in rows if not s.finished]
    return len(left) > 1 and left.count(left[0]) == len(left)


def kept_in_step(rows, sched, policy) -> bool:
    """Does the policy keep these rows from drafting because they are in step?"""
    return policy.weighs_step and in_step(rows, sched)


def needs_features(plan, sched, policy, forward) -> bool:
    """Does the pass need the drafter's features? Not when the drafter reads features and
    the pass's rows, carrying no drafts, are kept in step."""
    if not forward.feature_layers or any(plan.drafted):
        return True
    return not kept_in_step(plan.rows, sched, policy)
