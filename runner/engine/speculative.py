"""Turning one pass's logits into committed tokens for a row: plain next-token choice,
or verification of the row's depth-1 draft.

Greedy: the draft is kept when it equals the target's argmax, and then the bonus token
from the draft's own position is committed too. Sampling: the draft is kept with
probability min(1, p/q), else a token is drawn from norm(max(0, p - q)), so the
committed tokens are distributed exactly as without drafting. Commits stop token by
token at EOS or max_new_tokens (so an EOS as the accepted draft drops the bonus)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .sampler import accept_draft, probs, sample
from .sequence import Sequence


def choose(
    seq: Sequence, greedy: list[int], logits: Optional[np.ndarray], drafted: bool
) -> tuple[list[int], bool]:
    """Tokens to commit (before stop rules) and whether the draft was accepted.
    greedy: the target argmax at the row's logit positions; logits: (K, V), sampling rows only."""
    if seq.temperature == 0.0:
        if drafted and seq.draft == greedy[0]:
            return [seq.draft, greedy[1]], True
        return [greedy[0]], False
    p0 = probs(logits[0], seq.temperature, seq.top_p)
    if not drafted:
        return [sample(p0, seq.rng)], False
    ok, token = accept_draft(p0, seq.draft_probs, seq.draft, seq.rng)
    if not ok:
        return [token], False
    return [token, sample(probs(logits[1], seq.temperature, seq.top_p), seq.rng)], True


def commit(seq: Sequence, new: list[int], eos: frozenset[int], now_ns: int) -> int:
    """Append tokens one at a time under the stop rules, each stamped with now_ns (the
    pass's commit time: a draft and its bonus share it); returns how many were committed."""
    n = 0
    if not seq.first_token_ns:
        seq.first_token_ns = now_ns
    for token in new:
        seq.tokens.append(token)
        seq.token_ns.append(now_ns)
        n += 1
        if token in eos:
            seq.finish_reason = "eos"
            break
        if seq.num_output >= seq.max_new_tokens:
            seq.finish_reason = "length"
            break
    return n
