"""`runner train --drafter block --model tiny|deep [--recipe heldout|general] [--resume]
[--steps N] [--sequences N]`.

- `--recipe general` (`GENERAL`): prompts from the broad stdlib set (its tests and tools
  as well), 128-token prompts continued for 160, 24 anchors a sequence, 80% of the loss
  distilled from the target's logits, continued from the shipped drafter (its sha256 is
  part of the recipe, so a resume under another start is refused). Its state folder is
  `.resume/block_drafter-general/`.

- Trains the block drafter of a shipped checkpoint against its own greedy
  continuations (cached under `<model>/.resume/block_drafter/`), saving the full state
  every checkpoint_every steps there and the drafter itself into `<model>/block_drafter/`,
  so an interrupted run leaves a usable drafter and `--resume` goes on from the last step.
- Then (or alone, with `--evaluate-only`) evaluates it on the held-out prompts and
  rewrites the model card.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from .. import blas

MODELS = Path(__file__).resolve().parent.parent / "models"


def state_dir(checkpoint: Path, recipe: str = "heldout") -> Path:
    return checkpoint / ".resume" / ("block_drafter" if recipe == "heldout" else f"block_drafter-{recipe}")


# The general recipe's settings over the defaults: (continuations, training)
GENERAL = (
    dict(corpus="broad", sequences=4096, prompt_tokens=128, generate=160),
    dict(anchors=24, distill=0.8, peak_lr=1e-3, steps=1200),
)


def weights_sha(directory: Path) -> str:
    return hashlib.sha256((directory / "block_drafter.safetensors").read_bytes()).hexdigest()


def drafter_layers(num_hidden_layers: int) -> int:
    return 2 if num_hidden_layers <= 4 else 3


def main_train_drafter(args: argparse.Namespace) -> int:
    verb = "train --drafter block"
    if args.drafter != "block" or args.model not in ("tiny", "deep"):
        print("train: --drafter block needs --model tiny or --model deep", file=sys.stderr)
        return 2
    for flag, value in (("steps", args.steps), ("sequences", args.sequences)):
        if value is not None and value < 1:
            print(f"train: --{flag} must be >= 1, got {value}", file=sys.stderr)
            return 2
    if not args.no_openblas:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
        blas.reexec_with_openblas(blas.argv_from("train"))
    from ..engine.checkpoint import CheckpointError
    from .corpus import CorpusError

    checkpoint = MODELS / args.model
    try:
        if not args.evaluate_only:
            train(checkpoint, args, verb)
        finish(checkpoint, args.eval_prompts)
    except (CorpusError, CheckpointError, RuntimeError, ValueError) as e:
        print(f"train: {e}", file=sys.stderr)
        return 2
    return 0


def train(checkpoint: Path, args: argparse.Namespace, verb: str) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from ..engine.checkpoint import CheckpointError, load_model, read_args
    from ..engine.drafting.block_drafter import (
        BlockDrafter,
        DrafterConfig,
        drafter_dir,
        load_block_drafter,
        save_block_drafter,
        spread_layers,
    )
    from . import drafter_data, drafter_train

    log = lambda m: print(m, flush=True)  # noqa: E731
    target_args = read_args(checkpoint)
    target = load_model(checkpoint, target_args, with_mtp=False, with_indexer=False, fuse=False)
    general = getattr(args, "recipe", "heldout") == "general"
    cfg = drafter_train.DrafterTrainConfig(seed=args.seed, **(GENERAL[1] if general else {}))
    if args.steps:
        cfg.steps = args.steps
    if args.batch:
        cfg.batch = args.batch
    spec = drafter_data.ContinuationSpec(seed=args.seed, **(GENERAL[0] if general else {}))
    if args.sequences:
        spec = replace(spec, sequences=args.sequences)
    dcfg = DrafterConfig(
        hidden_size=target_args.hidden_size,
        target_layers=spread_layers(target_args.num_hidden_layers),
        num_layers=drafter_layers(target_args.num_hidden_layers),
        head_dim=target_args.head_dim,
        block_size=cfg.k,
    )
    meta = {"model": args.model, "drafter": asdict(dcfg), "train": asdict(cfg), "data": asdict(spec)}
    init = None
    states = state_dir(checkpoint, "general" if general else "heldout")
    if general:
        # the start is copied once: publishing overwrites the shipped drafter as it trains
        start = states / "init"
        if not (start / "block_drafter.safetensors").is_file():
            import shutil

            shutil.copytree(drafter_dir(checkpoint), start, dirs_exist_ok=True)
        init = load_block_drafter(start, name=str(start))
        meta["init"] = {"from": "the shipped drafter", "sha256": weights_sha(start)}
        dcfg = init.cfg
        meta["drafter"] = asdict(dcfg)
    restored = None
    if args.resume:
        restored = drafter_train.load_state(states, meta)
        if restored is None:
            log(f"{verb}: no saved state in {states}; starting from step 0")
    elif (states / drafter_train.LATEST).exists():
        raise CheckpointError(
            f"{states / drafter_train.LATEST}: an earlier run's state; pass --resume to continue it, "
            "or remove the folder to start over"
        )
    started = time.time()
    seqs = drafter_data.cached_continuations(checkpoint, states / "continuations.npz", spec, log)
    log(f"{verb}: target features of {len(seqs)} sequences (computed once)")
    features = drafter_train.precompute_features(
        target, seqs, dcfg.target_layers, log=log, dtype=mx.float16 if general else mx.float32
    )
    sampler = drafter_data.AnchorSampler(
        seqs, spec.prompt_tokens, cfg.batch, cfg.anchors, cfg.k, cfg.seed, features
    )
    if restored is not None:
        drafter = restored.drafter
    elif init is not None:
        drafter = init
    else:
        mx.random.seed(cfg.seed)
        drafter = BlockDrafter(dcfg)
        mx.eval(drafter.parameters())
    n_params = sum(a.size for _, a in tree_flatten(drafter.parameters()))
    log(
        f"{verb}: {args.model}, drafter {dcfg.num_layers} layers, {n_params / 1e6:.2f}M parameters, "
        f"{len(seqs)} sequences of {seqs.shape[1]} tokens"
    )

    def publish(d, history) -> None:
        out = drafter_dir(checkpoint)
        save_block_drafter(d, out)
        (out / "train_log.json").write_text(
            json.dumps(
                {
                    "train_config": asdict(cfg),
                    "data": asdict(spec),
                    "init": meta.get("init"),
                    "parameters": n_params,
                    "steps_done": len(history),
                    "train_s": history[-1]["elapsed_s"],
                    "command": " ".join(["runner", *blas.argv_from("train")]),
                    "blas": blas.describe(),
                    "history": history,
                }
            )
            + "\n"
        )

    drafter_train.train_drafter(
        drafter, target, sampler.next, sampler.rng, cfg, states, meta, restored, publish, log
    )
    log(f"{verb}: trained in {(time.time() - started) / 60:.1f} min (this process)")


def finish(checkpoint: Path, eval_prompts: int | None) -> None:
    from ..engine.drafting.block_drafter import drafter_dir
    from .card import write_card
    from .drafter_eval import evaluate_drafter

    results = evaluate_drafter(checkpoint, limit=eval_prompts, log=lambda m: print(m, flush=True))
    (drafter_dir(checkpoint) / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
    write_card(checkpoint)
    print(f"train: wrote {checkpoint / 'README.md'}", flush=True)
