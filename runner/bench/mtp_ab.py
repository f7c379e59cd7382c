"""Drafting A/B: decode tok/s per sequence with speculation off vs each drafting arm, at
one to four concurrent sequences, interleaved by round, with ratios over `off`, tokens
per drafting row-pass (tau), the mean decode pass time, acceptance by position, the draft
lengths passes carried, and state bytes.

- A drafting arm's gain over `off` is about its tokens per row-pass over its pass time
  relative to `off`'s (a drafting pass's time includes its drafter's work, which runs in
  the same step).
- Every width runs the same prompts each round (`round_prompts`), so acceptance, which
  follows the prompts, differs between one sequence and the ceiling only by batching.
- acceptance by position is `acceptance_at(i)` as pages show it; "k carried" the shares
  of decode passes by the most drafts a row carried (0: none).
- Arms name a drafter, a draft length k and a policy: `mtp` (k = 1), `mtp-chain` (the
  MTP layer chained, k = 3), `block-4` / `block-8` (the block drafter), `adaptive` (k
  chosen per width up to 8, MTP), `adaptive-block` (the same with the block drafter),
  `block-8-lookup` and `adaptive-block-lookup` (a row whose last 3 tokens occurred before
  drafts what followed them, the others the block drafter's: drafting/lookup.py), and
  the older policy arms `always`, `solo`, `lazy-solo` whose k is `--draft-tokens`.
- Every arm's knobs are checked against the checkpoint before anything loads: an arm the
  checkpoint cannot run (no block drafter) is one clear error, exit 2.
- "= off": whether the arm's greedy outputs were token for token `off`'s in every round
  (drafting must not change them).
"""

from __future__ import annotations

import math
import random
import statistics

import mlx.core as mx

from ..engine import Engine
from ..engine.config import MAX_DRAFT_TOKENS, MAX_TREE_LEAVES
from ..prompts import read_prompts
from ..unseen_text import fingerprint, unseen_prompts
from .stats import machine_line, ratio_spread, spread

ARMS = {
    "off": dict(mtp=False),
    "mtp": dict(mtp=True, draft_policy="always", draft_tokens=1),
    "mtp-chain": dict(mtp=True, draft_policy="always", draft_tokens=3),
    "block-4": dict(mtp=True, drafter="block", draft_policy="always", draft_tokens=4),
    "block-8": dict(mtp=True, drafter="block", draft_policy="always", draft_tokens=8),
    # lazy: when the cost model says not to draft, the drafter does not run either
    "adaptive": dict(mtp=True, draft_policy="adaptive", mtp_sync="lazy", draft_tokens=8),
    "adaptive-block": dict(
        mtp=True, drafter="block", draft_policy="adaptive", mtp_sync="lazy", draft_tokens=8
    ),
    # a lone row verifies its chain plus the drafter's second choices (engine/drafting/tree.py)
    "block-8-tree": dict(mtp=True, drafter="block", draft_policy="always", draft_tokens=8, draft_tree=2),
    "block-4-tree": dict(mtp=True, drafter="block", draft_policy="always", draft_tokens=4, draft_tree=2),
    "adaptive-block-tree": dict(
        mtp=True, drafter="block", draft_policy="adaptive", mtp_sync="lazy", draft_tokens=8, draft_tree=2
    ),
    # drafts looked up in the row's own tokens where its last 3+ occurred before (drafting/lookup.py)
    "block-8-lookup": dict(mtp=True, drafter="block", draft_policy="always", draft_tokens=8, draft_lookup=3),
    "adaptive-block-lookup": dict(
        mtp=True, drafter="block", draft_policy="adaptive", mtp_sync="lazy", draft_tokens=8, draft_lookup=3
    ),
    "always": dict(mtp=True, draft_policy="always"),
    "solo": dict(mtp=True, draft_policy="solo"),
    "lazy-solo": dict(mtp=True, draft_policy="solo", mtp_sync="lazy"),
}
FLEXIBLE = ("always", "solo", "lazy-solo")  # arms whose k is --draft-tokens
POOL_SEED = 2026  # the bench's prompt sample: the same prompts every run, spread over the set


class ArmError(Exception):
    """An arm the checkpoint cannot run; the message names the arm and the knob."""


def arm_knobs(arms: list[str], draft_tokens: int) -> dict[str, dict]:
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ArmError(f"unknown arm(s) {unknown}; known: {sorted(ARMS)}")
    return {a: dict(ARMS[a], draft_tokens=draft_tokens) if a in FLEXIBLE else ARMS[a] for a in arms}


def prompt_pool(engine: Engine, source: str, n: int, length: int) -> tuple[list[list[int]], str]:
    """Up to n prompts of `length` tokens from the checkpoint's held-out prompts or the
    unseen-text set, drawn by a seeded shuffle of all that are long enough, and a line
    naming the set (the unseen set's fingerprint) and the sample. Both sets run file by
    file (the unseen one package by package): their first n were one package's or a few
    modules' text, on which a drafter can land far more (or less) than on the set."""
    if source == "unseen":
        prompts = unseen_prompts()
        where = f"unseen-text prompts ({fingerprint(prompts)})"
    else:
        prompts = read_prompts(engine.checkpoint_dir / "heldout.jsonl")
        where = f"held-out prompts ({engine.checkpoint_dir / 'heldout.jsonl'})"
    ids = [engine.tokenizer.encode(p.text).ids for p in prompts]
    eligible = [(p.id, x[:length]) for p, x in zip(prompts, ids) if len(x) >= length]
    chosen = random.Random(POOL_SEED).sample(eligible, min(n, len(eligible)))
    groups = sorted({pid.split("/")[0] if source == "unseen" else pid.split(".")[0] for pid, _ in chosen})
    kind = "packages" if source == "unseen" else "modules"
    sample = f"a seeded sample of {len(chosen)} of {len(eligible)}, from {len(groups)} {kind}"
    return [x for _, x in chosen], f"{where}, {sample}"


def decode_span(requests: list) -> int:
    """A batch's decode, in ns: from its first request's first token to its last one's end."""
    return max(r.done_ns for r in requests) - min(r.first_token_ns for r in requests)


def measure(engine: Engine, batches: list[list[list[int]]], new_tokens: int) -> dict:
    """One round of an arm at one width: its batches one after another, figures over all."""
    passes, reqs, outputs = [], [], []
    span_ns = 0  # the batches' decode spans
    for batch in batches:
        outs, p, r = engine.collect(batch, new_tokens)
        passes.extend(p)
        reqs.extend(r)
        outputs.extend(outs)
        span_ns += decode_span(r)
    per_seq = [(r.output_tokens - 1) / ((r.done_ns - r.first_token_ns) / 1e9) for r in reqs]
    drafted = sum(p.drafted for p in passes)
    n = 1 + MAX_DRAFT_TOKENS + MAX_TREE_LEAVES  # the most drafts a row feeds, and none
    hist = [0] * n  # drafting row-passes by drafts kept
    lengths = [0] * n  # decode passes by the drafts a drafting row carried (0: none)
    carried, kept = [0] * n, [0] * n  # by draft position i: row-passes that carried / kept >= i
    for p in passes:
        for m, n in enumerate(p.accepted_lengths):
            hist[m] += n
        for i in range(1, len(p.draft_lengths)):
            carried[i] += sum(p.draft_lengths[i:])
            kept[i] += sum(p.accepted_lengths[i:])
        if p.kind == "decode":
            lengths[len(p.draft_lengths) - 1 if p.draft_lengths else 0] += 1
    row_passes = sum(hist)
    return dict(
        tau=(sum(m * n for m, n in enumerate(hist)) / row_passes + 1) if row_passes else 0.0,
        carried=carried,
        kept=kept,
        lengths=lengths,
        decode=statistics.mean(per_seq),
        # the batches' decode rate: a row that finishes early raises per_seq's mean, while
        # the batch waits for its last row (drafting at a width above one sets rows apart)
        batch=sum(r.output_tokens - 1 for r in reqs) / (span_ns / 1e9),
        drafted_passes=sum(p.drafted > 0 for p in passes),
        passes=len(passes),
        acceptance=(sum(p.accepted for p in passes) / drafted) if drafted else 0.0,
        state_mb=max(p.max_row_state_bytes for p in passes) / 1e6,
        pass_ms=statistics.mean(p.duration_ns for p in passes if p.kind == "decode") / 1e6,
        outputs=outputs,
    )


def best_of(repeats: int, engine: Engine, batches: list[list[list[int]]], new_tokens: int) -> dict:
    """The fastest of `repeats` back-to-back measurements (same prompts, same outputs)."""
    return max((measure(engine, batches, new_tokens) for _ in range(repeats)), key=lambda m: m["decode"])


def round_prompts(widths: tuple[int, ...]) -> int:
    """Prompts a round gives every width (the least common multiple of the widths): each
    width runs the same prompts in batches of its size, so acceptance, which follows the
    prompts, is the same at one sequence as at the ceiling and only batching differs."""
    return math.lcm(*widths)


def differences(off: Engine, prompts: list[list[int]], expected: list, got: list) -> list[str]:
    """Where an arm's greedy output first left `off`'s, row by row, with the gap between
    off's two best logits there (a gap near zero: the two computations rounded apart on a
    near tie; a wide one: a fault)."""
    out = []
    for row, (p, x, y) in enumerate(zip(prompts, expected, got)):
        if x == y:
            continue
        j = next((t for t in range(min(len(x), len(y))) if x[t] != y[t]), min(len(x), len(y)))
        logits, _ = off.model(mx.array([p + x[:j]]))
        scores = logits[0, -1].tolist()
        top = sorted(scores, reverse=True)
        best = scores.index(top[0])
        who = "off" if x[j : j + 1] == [best] else "the arm" if y[j : j + 1] == [best] else "neither"
        out.append(
            f"row {row} first differs at output token {j}: a plain forward of off's prefix picks "
            f"{who}'s token; its top-2 logit gap {top[0] - top[1]:.4f}"
        )
    return out


def by_position(carried: list[int], kept: list[int], upto: int = 4) -> str:
    """Acceptance at draft positions 1..upto as pages show it (`acceptance_at(i)`): the
    share of drafting row-passes that kept at least i drafts among those that carried i."""
    return "/".join(f"{kept[i] / carried[i]:.2f}" for i in range(1, upto + 1) if carried[i]) or "-"


def k_shares(lengths: list[int]) -> str:
    """Decode passes by the draft length they carried, as shares: '0:40% 4:60%'."""
    total = sum(lengths)
    return " ".join(f"{k}:{n / total:.0%}" for k, n in enumerate(lengths) if n) if total else "-"


def run(
    model: str,
    rounds: int,
    new_tokens: int,
    arms: list[str],
    repeats: int = 1,
    widths: tuple[int, ...] = (1, 4),
    draft_tokens: int = 1,
    prompts: str = "heldout",
    prompt_tokens: int = 48,
) -> None:
    knobs = arm_knobs(arms, draft_tokens)
    for a in arms:
        try:
            Engine.check_knobs(model, max_batch_size=4, prefill_chunk=256, **knobs[a])
        except ValueError as e:
            raise ArmError(f"arm {a}: {e}") from None
    engines = {
        a: Engine.from_pretrained(model, max_batch_size=4, prefill_chunk=256, **knobs[a]) for a in arms
    }
    for engine in engines.values():
        engine.warmup(prompt_tokens + new_tokens)
    any_engine = next(iter(engines.values()))
    n = round_prompts(widths)
    pool, where = prompt_pool(any_engine, prompts, n * (rounds + 1), prompt_tokens)
    if len(pool) < n * (rounds + 1):
        raise ArmError(
            f"the {where} hold {len(pool)} prompts of at least {prompt_tokens} tokens; "
            f"{rounds + 1} rounds (one to warm up) of {n} need {n * (rounds + 1)}"
        )
    rounds_of = [pool[i * n : (i + 1) * n] for i in range(rounds + 1)]
    sets = {w: [[p[j : j + w] for j in range(0, n, w)] for p in rounds_of] for w in widths}
    results = {(a, w): [] for a in arms for w in widths}
    for r in range(rounds + 1):  # round 0 warms up (compilation, the policy's first costs); dropped
        for w in widths:
            for a in arms[r % len(arms) :] + arms[: r % len(arms)]:  # rotated: no arm always first
                m = best_of(repeats, engines[a], sets[w][r], new_tokens)
                if r:
                    results[(a, w)].append(m)
    print(machine_line())
    print(
        f"checkpoint: {any_engine.checkpoint_dir}, {rounds} interleaved rounds (fastest of {repeats} runs "
        f"each), {new_tokens} new tokens, {n} prompts of {prompt_tokens} tokens a round at every width "
        f"(in batches of the width) from the {where}; arms' k: "
        + ", ".join(f"{a} {knobs[a].get('draft_tokens', 0)}" for a in arms)
    )
    print(
        f"{'arm':<14} {'seqs':>4} {'decode tok/s/seq':>24} {'vs off':>20} {'batch vs off':>20} "
        f"{'drafted passes':>15} "
        f"{'acceptance':>11} {'tokens/row-pass':>15} {'ms/pass':>8} {'by position':>19} "
        f"{'state MB/seq':>12} {'= off':>5}  k carried"
    )
    for w in widths:
        for a in arms:
            ms = results[(a, w)]
            dec = [m["decode"] for m in ms]
            base = [m["decode"] for m in results[("off", w)]] if "off" in arms else dec
            batch = [m["batch"] for m in ms]
            batch_base = [m["batch"] for m in results[("off", w)]] if "off" in arms else batch
            drafted_passes = statistics.mean(m["drafted_passes"] for m in ms)
            taus = [m["tau"] for m in ms if m["tau"]]  # runs that drafted at all
            passes = statistics.mean(m["passes"] for m in ms)
            carried, kept = ([sum(m[key][i] for m in ms) for i in range(17)] for key in ("carried", "kept"))
            lengths = [sum(m["lengths"][i] for m in ms) for i in range(17)]
            offs = results.get(("off", w), ms)
            same = sum(m["outputs"] == o["outputs"] for m, o in zip(ms, offs))
            same_text = "yes" if same == len(ms) else f"NO {same}/{len(ms)}"
            print(
                f"{a:<14} {w:>4} {spread(dec):>24} {ratio_spread(dec, base):>20} "
                f"{ratio_spread(batch, batch_base):>20} "
                f"{drafted_passes:>7.1f}/{passes:<7.1f}"
                f"{statistics.mean(m['acceptance'] for m in ms):>11.1%} "
                f"{statistics.mean(taus) if taus else 0.0:>15.2f} "
                f"{statistics.median(m['pass_ms'] for m in ms):>8.2f} {by_position(carried, kept):>19} "
                f"{max(m['state_mb'] for m in ms):>12.3f} {same_text:>5}"
                f"  {k_shares(lengths)}"
            )
    if "off" not in arms:
        return
    for w in widths:
        for a in arms:
            for r, (m, o) in enumerate(zip(results[(a, w)], results[("off", w)]), start=1):
                prompts = [p for batch in sets[w][r] for p in batch]
                for line in differences(engines["off"], prompts, o["outputs"], m["outputs"]):
                    print(f"{a} at {w} sequence(s), round {r}: {line}")
