"""MTP A/B: decode tok/s per sequence with speculation off vs each draft policy, at one
and at four concurrent sequences, with drafted passes, acceptance, accepted length and
state bytes. `draft_tokens` (k) is given to every drafting arm."""

from __future__ import annotations

import statistics

from ..engine import Engine
from ..prompts import read_prompts
from .stats import machine_line, ratio_spread, spread

ARMS = {
    "off": dict(mtp=False),
    "always": dict(mtp=True, draft_policy="always"),
    "solo": dict(mtp=True, draft_policy="solo"),
    # lazy: when the cost model says not to draft, the MTP layer is not run either
    "adaptive": dict(mtp=True, draft_policy="adaptive", mtp_sync="lazy"),
    "lazy-solo": dict(mtp=True, draft_policy="solo", mtp_sync="lazy"),
}


def heldout_prompts(engine: Engine, n: int, length: int) -> list[list[int]]:
    texts = [p.text for p in read_prompts(engine.checkpoint_dir / "heldout.jsonl")]
    ids = [engine.tokenizer.encode(t).ids for t in texts]
    return [x[:length] for x in ids if len(x) >= length][:n]


def measure(engine: Engine, prompts: list[list[int]], new_tokens: int) -> dict:
    _, passes, reqs = engine.collect(prompts, new_tokens)
    per_seq = [(r.output_tokens - 1) / ((r.done_ns - r.first_token_ns) / 1e9) for r in reqs]
    drafted = sum(p.drafted for p in passes)
    hist = [0] * 17  # drafting row-passes by drafts kept
    for p in passes:
        for m, n in enumerate(p.accepted_lengths):
            hist[m] += n
    row_passes = sum(hist)
    return dict(
        tau=(sum(m * n for m, n in enumerate(hist)) / row_passes + 1) if row_passes else 0.0,
        decode=statistics.mean(per_seq),
        drafted_passes=sum(p.drafted > 0 for p in passes),
        passes=len(passes),
        acceptance=(sum(p.accepted for p in passes) / drafted) if drafted else 0.0,
        state_mb=max(p.max_row_state_bytes for p in passes) / 1e6,
    )


def best_of(repeats: int, engine: Engine, prompts: list[list[int]], new_tokens: int) -> dict:
    """The fastest of `repeats` back-to-back measurements (same prompts, same outputs)."""
    return max((measure(engine, prompts, new_tokens) for _ in range(repeats)), key=lambda m: m["decode"])


def run(
    model: str,
    rounds: int,
    new_tokens: int,
    arms: list[str],
    repeats: int = 1,
    widths: tuple[int, ...] = (1, 4),
    draft_tokens: int = 1,
) -> None:
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"runner bench --mtp: unknown arm(s) {unknown}; known: {sorted(ARMS)}")
    knobs = {a: dict(ARMS[a], draft_tokens=draft_tokens) if ARMS[a]["mtp"] else ARMS[a] for a in arms}
    engines = {
        a: Engine.from_pretrained(model, max_batch_size=4, prefill_chunk=256, **knobs[a]) for a in arms
    }
    for engine in engines.values():
        engine.warmup(48 + new_tokens)
    sets = {}
    any_engine = next(iter(engines.values()))
    pool = heldout_prompts(any_engine, max(widths) * (rounds + 1), 48)
    for width in widths:
        sets[width] = [pool[i * width : (i + 1) * width] for i in range(rounds + 1)]
    results = {(a, w): [] for a in arms for w in widths}
    for r in range(rounds + 1):  # round 0 warms up (compilation) and is dropped
        for w in widths:
            for a in arms[r % len(arms) :] + arms[: r % len(arms)]:  # rotated: no arm always first
                m = best_of(repeats, engines[a], sets[w][r], new_tokens)
                if r:
                    results[(a, w)].append(m)
    print(machine_line())
    print(
        f"checkpoint: {any_engine.checkpoint_dir}, {rounds} interleaved rounds (fastest of {repeats} runs "
        f"each), {new_tokens} new tokens, held-out prompts of 48 tokens, draft_tokens {draft_tokens}"
    )
    print(
        f"{'arm':<10} {'seqs':>4} {'decode tok/s/seq':>24} {'vs off':>20} {'drafted passes':>15} "
        f"{'acceptance':>11} {'tokens/draft':>12} {'state MB/seq':>12}"
    )
    for w in widths:
        for a in arms:
            ms = results[(a, w)]
            dec = [m["decode"] for m in ms]
            base = [m["decode"] for m in results[("off", w)]] if "off" in arms else dec
            drafted_passes = statistics.mean(m["drafted_passes"] for m in ms)
            taus = [m["tau"] for m in ms if m["tau"]]  # runs that drafted at all
            passes = statistics.mean(m["passes"] for m in ms)
            print(
                f"{a:<10} {w:>4} {spread(dec):>24} {ratio_spread(dec, base):>20} "
                f"{drafted_passes:>7.1f}/{passes:<7.1f}"
                f"{statistics.mean(m['acceptance'] for m in ms):>11.1%} "
                f"{statistics.mean(taus) if taus else 0.0:>12.2f} {max(m['state_mb'] for m in ms):>12.3f}"
            )
