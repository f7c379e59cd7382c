"""`runner bench`: speed benchmarks whose output goes into notes, never into tests.

`runner bench` compares this engine with mlx-lm on one checkpoint (decode tok/s at
batch 1, aggregate decode tok/s at batch 4, prefill tok/s for a 512-token prompt);
`runner bench --mtp` is the drafting A/B (off vs each drafting arm at 1 and 4 sequences:
the MTP layer at k = 1 and chained, the block drafter, the adaptive policy; see mtp_ab.py);
`runner bench --pass-cost` times a drafting pass against a plain one for the
checkpoint's shape at several main-layer counts (what acceptance drafting needs);
`runner bench --exp` times the passes a drafting run computes with fast_math's exp against
MLX's own (exp_ab.py).
Systems and arms are interleaved within each round so machine drift hits all alike.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="checkpoint dir or shipped name (default: tiny)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per sequence (default: 128)")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="back-to-back runs of each cell per round, the fastest kept: a run of a few "
        "hundred ms on a shared machine is often hit by a neighbour (default: 3)",
    )
    p.add_argument(
        "--no-openblas",
        action="store_true",
        help="keep MLX's bundled reference BLAS (default: re-run under Debian's OpenBLAS when installed)",
    )
    p.add_argument("--mtp", action="store_true", help="run the MTP A/B instead of the mlx-lm comparison")
    p.add_argument(
        "--pass-cost",
        action="store_true",
        help="time a drafting pass against a plain one for the checkpoint's shape with "
        "--layers main layers (random weights)",
    )
    p.add_argument(
        "--exp",
        action="store_true",
        help="time plain, verify and block-drafter passes computing exp from fused arithmetic "
        "against MLX's own exp, side by side",
    )
    p.add_argument(
        "--layers",
        default="4,8,16",
        help="with --pass-cost: comma-separated main-layer counts (default: 4,8,16)",
    )
    p.add_argument(
        "--seqs", default="1,4", help="with --mtp: comma-separated sequence counts, 1 to 4 (default: 1,4)"
    )
    p.add_argument(
        "--draft-tokens",
        type=int,
        default=1,
        help="with --mtp: drafts a row carries into a pass in the arms always, solo and lazy-solo, "
        "1 to 16 (the MTP layer chained k times; default: 1); the other arms name their own k",
    )
    p.add_argument(
        "--prompts",
        choices=("heldout", "unseen"),
        default="heldout",
        help="with --mtp: the checkpoint's held-out prompts (its training corpus's other files), or "
        "unseen text: third-party packages' code no checkpoint or drafter was trained on "
        "(runner/unseen_text.py; default: heldout)",
    )
    p.add_argument(
        "--prompt-tokens",
        type=int,
        default=48,
        help="with --mtp: each prompt's first N tokens (default: 48)",
    )
    p.add_argument(
        "--arms",
        default="off,mtp,mtp-chain,adaptive",
        help="with --mtp: comma-separated arms among off, mtp (k = 1), mtp-chain (k = 3), block-4, "
        "block-8 (the block drafter), block-4-tree, block-8-tree (a lone row verifies a draft tree), "
        "block-8-lookup (rows whose last 3 tokens occurred before draft what followed them), "
        "adaptive (k up to 8), adaptive-block, adaptive-block-tree, adaptive-block-lookup, "
        "always, solo, lazy-solo "
        "(default: off,mtp,mtp-chain,adaptive)",
    )


def main(args: argparse.Namespace) -> int:
    from .. import blas

    if args.rounds < 1 or args.repeats < 1:
        print("runner bench: --rounds and --repeats must be at least 1")
        return 2
    layers, seqs = _layer_counts(args.layers), _layer_counts(args.seqs)
    if layers is None:
        print(f"runner bench: --layers expects comma-separated positive integers, got {args.layers!r}")
        return 2
    if seqs is None or max(seqs) > 4:
        print(f"runner bench: --seqs expects comma-separated sequence counts from 1 to 4, got {args.seqs!r}")
        return 2
    if not 8 <= args.prompt_tokens <= 512:
        print(f"runner bench: --prompt-tokens expects a count from 8 to 512, got {args.prompt_tokens}")
        return 2
    if not 1 <= args.draft_tokens <= 16:
        print(f"runner bench: --draft-tokens expects a count from 1 to 16, got {args.draft_tokens}")
        return 2
    from ..engine.checkpoint import CheckpointError

    if not args.no_openblas:
        blas.reexec_with_openblas(blas.argv_from("bench"))
    try:
        if args.pass_cost:
            from .pass_cost import run

            run(args.model, args.rounds, layers)
        elif args.exp:
            from .exp_ab import run

            run(args.model, args.rounds)
        elif args.mtp:
            from .mtp_ab import ArmError, run

            try:
                run(
                    args.model,
                    args.rounds,
                    args.tokens,
                    args.arms.split(","),
                    args.repeats,
                    tuple(seqs),
                    args.draft_tokens,
                    args.prompts,
                    args.prompt_tokens,
                )
            except ArmError as e:
                print(f"runner bench --mtp: {e}")
                return 2
        else:
            from .versus_mlx_lm import run

            run(args.model, args.rounds, args.tokens, args.repeats)
    except CheckpointError as e:
        print(f"runner bench: {e}")
        return 2
    return 0


def _layer_counts(text: str):
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        return None
    return counts if counts and all(c > 0 for c in counts) else None
