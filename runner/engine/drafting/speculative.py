"""Turning one pass's logits into committed tokens for a row: plain next-token choice, or
verification of the row's k drafts.

- Greedy: keep the longest prefix of drafts equal to the target's argmax at the position
  before each, then the target's own next token (the bonus when all k match).
- Sampling: keep draft i with probability min(1, p_i/q_i); at the first rejection draw
  from norm(max(0, p_i - q_i)) and stop; after all k draw the bonus from p_k. Committed
  tokens are then distributed exactly as without drafting.
- Commits stop token by token at EOS or max_new_tokens, inside an accepted block too (so
  an EOS as an accepted draft drops what follows).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from ..sampler import accept_draft, probs, sample
from ..sequence import Sequence


class Choice(NamedTuple):
    tokens: list[int]  # to commit, before the stop rules
    accepted: int  # drafts kept (the tokens' length is accepted + 1)


def choose(seq: Sequence, greedy: list[int], logits: Optional[np.ndarray], drafted: int) -> Choice:
    """greedy: the target argmax at the row's logit positions (its fed tokens, in order);
    logits: (K, V), sampling rows only; drafted: the drafts the row fed (seq.drafts)."""
    drafts = seq.drafts[:drafted]
    if seq.temperature == 0.0:
        m = 0
        while m < drafted and drafts[m] == greedy[m]:
            m += 1
        return Choice(drafts[:m] + [greedy[m]], m)
    for i in range(drafted):
        ok, token = accept_draft(
            probs(logits[i], seq.temperature, seq.top_p), seq.draft_probs[i], drafts[i], seq.rng
        )
        if not ok:
            return Choice(drafts[:i] + [token], i)
    bonus = sample(probs(logits[drafted], seq.temperature, seq.top_p), seq.rng)
    return Choice(drafts + [bonus], drafted)


def commit(seq: Sequence, new: list[int], eos: frozenset[int], now_ns: int) -> int:
    """Append tokens one at a time under the stop rules, each stamped with now_ns (the
    pass's commit time: drafts and their bonus share it); returns how many were committed."""
    n = 0
    if not seq.first_token_ns:
        seq.first_token_ns = now_ns
    for token in new:
        seq.tokens.append(token)
        seq.token_ns.append(now_ns)
        n += 1
        if token in eos:
            seq.finish("eos")
            break
        if seq.num_output >= seq.max_new_tokens:
            seq.finish("length")
            break
    return n
