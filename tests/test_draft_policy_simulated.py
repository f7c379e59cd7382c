"""The adaptive draft policy on a simulated machine: pass durations drawn from a cost
curve per width, acceptance drawn per row, the engine's order of calls. It must find the
best k alone, not lose batched, follow a machine that slows down, draft again after a slow
spell, and step past a short draft length whose realized rate is vetoed."""

from __future__ import annotations

import numpy as np
import pytest
from test_draft_policy import feed, policy

from runner.engine.drafting.draft_policy import Branch, DraftPolicy, draft_lengths

# A simulated machine: pass durations from a cost curve per width with noise, the
# switching cost of a lazy MTP catching up, acceptance drawn per row; the engine's order
# of calls (decide after the commit, then record).

CHAIN = (0.8, 0.75, 0.7, 0.7, 0.65, 0.6, 0.6, 0.55)  # acceptance at positions 1..8


def curve(width: int):
    """Plain pass 1 ms a row-ish; each draft a row costs 6% of a plain pass alone, 80% at 4
    rows; drafting also gives up pipelining (15%)."""
    base, per_draft = 1e6 * (1 + 0.3 * (width - 1)), 0.06 if width == 1 else 0.80
    return lambda k: base * (1 + (0.15 + per_draft * k if k else 0))


def expected(width: int, k: int) -> float:
    """Tokens per ns of a fixed k on the simulated machine."""
    reach, tokens = 1.0, 1.0
    for a in CHAIN[:k]:
        reach *= a
        tokens += reach
    return width * tokens / curve(width)(k)


def simulate(
    p: DraftPolicy, width: int, passes: int, rng, slow_after: int = 10**9, cost=None, spell=range(0)
) -> tuple[float, list[int]]:
    """Tokens per ns the policy achieves, and the k of each pass (cost: k -> ns, else the
    width's curve; every pass 2x slower after slow_after and during the passes in spell)."""
    cost, tokens, ns, ks = cost or curve(width), 0, 0.0, []
    k = p.decide(width)
    for i in range(passes):
        nxt = p.decide(width)
        d = cost(k) * rng.lognormal(0, 0.1) * (2 if i > slow_after or i in spell else 1)
        if rng.random() < 0.02:
            d *= 5  # a neighbour's burst
        if nxt and not k:
            d += 3 * cost(0)  # the lazy MTP catches up
        hist = [0] * (k + 1)
        for _ in range(width):
            m = 0
            while m < k and rng.random() < CHAIN[m]:
                m += 1
            hist[m] += 1
            tokens += m + 1
        hist = tuple(hist) if k else ()
        p.record(Branch("decode", width, k), int(d), hist, drafts_next=nxt, ahead=False, queued=None)
        ns += d
        ks.append(k)
        k = nxt
    return tokens / ns, ks


def rounds(p: DraftPolicy, seed: int) -> tuple[list[float], list[float], list[int], list[int]]:
    """Six rounds of one sequence then four (150 passes each), round 0 dropped as in
    `runner bench`: each round's tokens per ns alone and batched, and the k chosen."""
    rng, alone, batched, ks1, ks4 = np.random.default_rng(seed), [], [], [], []
    for r in range(6):
        a, k1 = simulate(p, 1, 150, rng)
        b, k4 = simulate(p, 4, 150, rng)
        if r:
            alone, batched, ks1, ks4 = alone + [a], batched + [b], ks1 + k1, ks4 + k4
    return alone, batched, ks1, ks4


NOISE_MEAN = float(np.exp(0.005)) * (1 + 0.02 * 4)  # the mean of the lognormal and of the bursts


def test_simulated_adaptive_drafts_long_alone_and_not_at_all_batched():
    best = max(draft_lengths(8), key=lambda k: expected(1, k))
    assert best >= 4 and expected(4, 0) > max(expected(4, k) for k in (1, 2, 4, 8))  # the premise
    for seed in range(3):
        alone, batched, ks1, ks4 = rounds(policy("adaptive", 8), seed)
        # within 10% of the best fixed k alone, and not worse than not drafting batched
        # (what a fixed k gets on this machine, noise included), exploring included
        assert np.mean(alone) >= 0.9 * expected(1, best) / NOISE_MEAN
        assert np.mean(batched) >= 0.97 * expected(4, 0) / NOISE_MEAN
        assert np.median(ks1) >= 4 and np.median(ks4) == 0  # the choices move with width


def test_simulated_adaptive_follows_a_machine_that_slows_down():
    p, rng = policy("adaptive", 8), np.random.default_rng(1)
    rate, ks = simulate(p, 1, 1500, rng, slow_after=500)  # everything 2x slower from pass 500
    fixed = expected(1, 4) / NOISE_MEAN * 1500 / (500 + 2 * 1000)
    assert np.median(ks[600:]) >= 4 and rate >= 0.9 * fixed


# A block drafter alone: its pass costs about the same at every length, so one draft loses
# where four or eight pay (about 1.3x passes without drafts here).
def BLOCK(k: int) -> float:
    return 1e6 * (1 + (0.9 + 0.1 * k if k else 0))


def test_a_short_draft_vetoed_does_not_keep_adaptive_from_longer_ones_that_pay():
    # As the block drafter alone on an EPYC VM (unseen prompts): its pass costs about the
    # same at every length, so one draft loses where four or eight pay. Side by side, k = 1
    # had been priced paying (1.70 against 1.56) while its realized rate, which holds the
    # backlog flushed into the drafter's context when drafting resumes, was below passes
    # without drafts: the veto held k = 0 while the model, still keeping 1, re-measured 0
    # beside it and never climbed to 2, 4 or 8 (0 in 1852 of 1875 passes).
    # Which lengths a short window's noisy realized rates veto varies from seed to seed (a
    # block of drafts commits one token to k + 1 a pass), so this holds over ten.
    rates = []
    for seed in range(10):
        p, rng = policy("adaptive", 8), np.random.default_rng(seed)
        feed(p, 1, {0: 1.0e6, 1: 1.3e6}, n=5)  # MIN_SIDE comparisons: priced, not settled
        for _ in range(20):
            p.realized.add(1, 0, 1, int(1.0e6))
            p.realized.add(1, 1, 1, int(2.0e6))
        rate, ks = simulate(p, 1, 600, rng, cost=BLOCK)
        assert 1 not in ks[:200] and max(ks) >= 4
        rates.append(rate * 1e6)  # tokens a ms: passes without drafts make 1 / NOISE_MEAN
    assert np.mean(rates) >= 1.05 and min(rates) >= 0.95


@pytest.mark.parametrize("spell_start, seed", [(60, 0), (60, 2), (90, 0), (150, 0), (270, 3), (270, 5)])
def test_a_slow_spell_while_drafting_does_not_stop_adaptive_drafting_after_it(spell_start, seed):
    # A VM's speed moves by half from one minute to the next. The policy starts from a
    # warm-up's costs (each length timed a few times, 10% off) and the drafter's acceptance;
    # then 80 passes run 2x slower. Realized rates that never aged compared drafting passes
    # of the spell with passes without drafts from before or after it: in these runs the
    # vetoes outlived the spell and adaptive then ran mostly without drafts or with one.
    rng = np.random.default_rng(seed)
    p = DraftPolicy("adaptive", None, 8, prior=CHAIN)
    feed(p, 1, {k: BLOCK(k) * (1 + 0.1 * rng.standard_normal()) for k in draft_lengths(8)}, n=6)
    rate, ks = simulate(p, 1, 900, rng, cost=BLOCK, spell=range(spell_start, spell_start + 80))
    after = ks[spell_start + 300 :]
    assert np.mean([k >= 2 for k in after]) >= 0.8
    assert rate >= 1.0 / 1e6  # not below passes without drafts (1 token a ms), spell included
