"""The adaptive policy's per-pass shortcuts (it runs on the host every pass) decide what the
plain computations would: a steady run of one branch skips the comparisons none can make,
and the acceptance estimate keeps each position's prior and weight as they change. One
decides less often, by design: a batch kept at k = 0 weighs its costs every HOLD passes."""

from __future__ import annotations

import random
from collections import Counter, deque
from statistics import median

from test_acceptance_estimate import EVALUATED

from runner.engine.drafting.acceptance import (
    DRAFT_MEMORY,
    IDLE_MEMORY,
    MAX_POSITIONS,
    MEASURED_PRIOR_DRAFTS,
    PRIOR_DRAFTS,
    PositionAcceptance,
    conditional,
)
from runner.engine.drafting.draft_cost import HISTORY, MIN_SIDE, RATIOS, WidthModel
from runner.engine.drafting.draft_policy import HOLD, DraftPolicy


def compared(events: list) -> dict:
    """Every pair's comparisons, as observe made them before its shortcut: each steady pass
    in the minority compared with the median of each other branch in the history."""
    history, comparisons = deque(maxlen=HISTORY), {}
    for event in events:
        if event == "clear":
            history.clear()
            continue
        k, ns = event
        history.append((k, ns))
        counts = Counter(was for was, _ in history)
        for other, n in counts.items():
            if other == k or n < MIN_SIDE or counts[k] > n:
                continue
            around = median(d for was, d in history if was == other)
            pair, ratio = (k, other), ns / around
            if k < other:
                pair, ratio = (other, k), 1 / ratio
            comparisons.setdefault(pair, deque(maxlen=RATIOS)).append(ratio)
    return {p: list(c) for p, c in comparisons.items()}


def test_a_steady_run_skips_only_comparisons_none_could_make():
    rng = random.Random(7)
    for trial in range(40):
        events, k = [], 0
        for _ in range(400):
            if rng.random() < 0.01:
                events.append("clear")  # as the warm-up leaves the history
            if rng.random() < 0.15:  # runs of one branch, then windows of another
                k = rng.choice((0, 1, 2, 4, 8))
            events.append((k, rng.randint(8_000_000, 30_000_000)))
        model = WidthModel()
        for event in events:
            if event == "clear":
                model.history.clear()
            else:
                model.observe(*event)
        assert {p: list(c) for p, c in model.comparisons.items()} == compared(events), trial


class Plain:
    """The estimate's counts kept the plain way: every position aged, every weight afresh."""

    def __init__(self, prior: tuple[float, ...]):
        self.prior, n = prior, MAX_POSITIONS + 1
        self.weight = MEASURED_PRIOR_DRAFTS if prior else PRIOR_DRAFTS
        self.reached, self.hit, self.drafts = [0.0] * n, [0.0] * n, [0] * n

    def add(self, lengths: tuple[int, ...]) -> None:
        for i in range(1, min(len(lengths), MAX_POSITIONS + 1)):
            n, ok = sum(lengths[i - 1 :]), sum(lengths[i:])
            if n:
                keep = DRAFT_MEMORY**n
                self.reached[i], self.hit[i] = keep * self.reached[i] + n, keep * self.hit[i] + ok
                self.drafts[i] += n

    def add_tail(self, after: int, landed: int, length: int) -> None:
        for i in range(after + 1, min(after + min(landed + 1, length), MAX_POSITIONS) + 1):
            self.reached[i] = DRAFT_MEMORY * self.reached[i] + 1
            self.hit[i] = DRAFT_MEMORY * self.hit[i] + (i <= after + landed)
            self.drafts[i] += 1

    def age(self) -> None:
        if self.prior:
            self.reached = [x * IDLE_MEMORY for x in self.reached]
            self.hit = [x * IDLE_MEMORY for x in self.hit]

    def at(self, upto: int) -> list[float]:
        out, rate, before = [], 0.5, 0.5
        for j in range(1, upto + 1):
            prior = self.prior[min(j, len(self.prior)) - 1] if self.prior else 0.5
            lean = min(rate * prior / before, 1.0)
            w = max(PRIOR_DRAFTS, self.weight * DRAFT_MEMORY ** self.drafts[j])
            rate = (self.hit[j] + w * lean) / (self.reached[j] + w)
            out.append(rate)
            before = prior
        return out


def test_the_kept_priors_weights_and_aging_give_the_estimate_the_plain_way():
    rng = random.Random(3)
    for prior in ((), conditional(EVALUATED)):
        a, plain = PositionAcceptance(prior), Plain(prior)
        for step in range(400):
            roll = rng.random()
            if roll < 0.3:
                lengths = tuple(rng.randint(0, 3) for _ in range(rng.choice((2, 3, 5, 9))))
                a.add(lengths)
                plain.add(lengths)
            elif roll < 0.4:
                tail = rng.randint(0, 3), rng.randint(0, 4), rng.randint(1, 5)
                a.add_tail(*tail)
                plain.add_tail(*tail)
            else:
                a.age()
                plain.age()
            got = [a.at(i) for i in range(1, 13)]
            assert all(abs(x - y) < 1e-9 for x, y in zip(plain.at(12), got)), step


def test_aging_before_any_draft_keeps_the_estimate_as_it_was():
    a = PositionAcceptance(conditional(EVALUATED))
    before = [a.at(i) for i in range(1, 9)]
    for _ in range(50):
        a.age()
    assert [a.at(i) for i in range(1, 9)] == before
    assert abs(a.expected_tokens(8) - (1 + sum(EVALUATED))) < 1e-9


def weighings(p: DraftPolicy, width: int) -> list:
    """Counts the width model's weighings (each full decision asks it to choose)."""
    model, seen = p.width(width), []
    choose = model.choose
    model.choose = lambda *a, **k: seen.append(1) or choose(*a, **k)
    return seen


def test_a_batch_kept_at_no_drafts_weighs_its_costs_every_hold_passes_a_lone_row_every_pass():
    p = DraftPolicy("adaptive", None, 8, conditional(EVALUATED))
    for width in (1, 4):  # drafts cost 2x and 3x a pass: none pays at either width
        for _ in range(20):
            for k, ns in ((0, 1.0e6), (1, 2.0e6), (2, 3.0e6)):
                p.width(width).observe(k, int(ns))
    seen, before = weighings(p, 4), p.width(4).decisions
    assert [p.decide(4) for _ in range(2 * HOLD + 1)] == [0] * (2 * HOLD + 1)
    assert len(seen) == 3 and p.width(4).decisions == before + 2 * HOLD + 1  # held passes count
    assert p.reason.startswith("k 0: tokens per unit of time") and not p.reason.endswith("(held)")
    p.decide(4)
    assert p.reason.endswith("(held)")  # the pass row says its k was kept, not weighed
    p.width(4).observe(4, int(5.0e6))  # a new comparison at the width ends the hold
    p.decide(4)
    assert len(seen) == 4
    alone = weighings(p, 1)
    assert [p.decide(1) for _ in range(8)] == [0] * 8 and len(alone) == 8
