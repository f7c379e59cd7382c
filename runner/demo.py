"""`runner demo`: continue a few held-out prompts on a checkpoint and show the engine's
per-pass accounting; a smoke test a person can read."""

from __future__ import annotations

import argparse

from .engine import Engine


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="checkpoint dir or shipped name (default: tiny)")
    p.add_argument("--prompts", type=int, default=3, help="how many held-out prompts (default: 3)")
    p.add_argument("--tokens", type=int, default=40, help="new tokens each (default: 40)")
    p.add_argument("--mtp", action="store_true", help="draft with the MTP layer (draft_policy=always)")


def main(args: argparse.Namespace) -> int:
    from .engine.checkpoint import CheckpointError, resolve_checkpoint
    from .prompts import read_prompts

    try:
        engine = Engine.from_pretrained(args.model, max_batch_size=4, mtp=args.mtp)
    except (CheckpointError, ValueError) as e:
        print(f"runner demo: {e}")
        return 2
    texts = [
        p.text[:300] for p in read_prompts(resolve_checkpoint(args.model) / "heldout.jsonl")[: args.prompts]
    ]
    prompts = [engine.tokenizer.encode(t).ids[:48] for t in texts]
    outs, passes, _ = engine.collect(prompts, args.tokens)
    for p, o in zip(prompts, outs):
        print("-" * 72)
        print(engine.tokenizer.decode(p) + "\033[1m" + engine.tokenizer.decode(o) + "\033[0m")
    drafted = sum(p.drafted for p in passes)
    print("-" * 72)
    print(
        f"{len(passes)} passes, {sum(p.emitted for p in passes)} tokens emitted, "
        f"widths {sorted({p.width for p in passes})}, drafted {drafted}, accepted "
        f"{sum(p.accepted for p in passes)}, {sum(p.duration_ns for p in passes) / 1e6:.0f} ms in passes"
    )
    return 0
