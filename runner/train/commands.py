"""`runner train-tiny`: re-create `runner/models/tiny` from the pinned stdlib corpus.

Reads the corpus (checked against the manifest), trains the tokenizer, writes the
held-out prompts, trains the model with periodic checkpoints, then evaluates and writes
the model card. Takes about an hour on a 2-core machine; never run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from .. import blas
from ..experiments.chip import core_count, cpu_name

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "models" / "tiny"
VOCAB_SIZE = 4096
DISTILL_STEPS = 200  # the shipped model: joint training, then 200 MTP self-distillation steps


def add_train_tiny_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="checkpoint directory (default: runner/models/tiny)"
    )
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the shipped recipe's)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="corpus manifest (default: runner/train/corpus_manifest.json)",
    )
    p.add_argument(
        "--rebuild-manifest",
        action="store_true",
        help="pin this interpreter's stdlib files instead of checking them",
    )
    p.add_argument("--no-openblas", action="store_true", help="do not re-run under LD_PRELOAD=OpenBLAS")
    p.add_argument(
        "--distill-steps",
        type=int,
        default=DISTILL_STEPS,
        help=f"after training, self-distil the MTP layer for N steps, 0 for none (default {DISTILL_STEPS})",
    )
    p.add_argument(
        "--distill-only",
        action="store_true",
        help="skip training: self-distil the MTP layer of --out, then evaluate",
    )
    p.add_argument(
        "--evaluate-only", action="store_true", help="only evaluate --out and rewrite its model card"
    )
    p.add_argument(
        "--eval-prompts", type=int, default=None, help="evaluate MTP acceptance on the first N prompts only"
    )


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--preset",
        choices=("tiny", "deep"),
        help="tiny: re-create runner/models/tiny; deep: grow it to 16 layers and train on",
    )
    p.add_argument("--drafter", choices=("block",), help="train a shipped model's block drafter instead")
    p.add_argument("--model", choices=("tiny", "deep"), help="with --drafter: the shipped model")
    p.add_argument(
        "--sequences",
        type=int,
        default=None,
        help="with --drafter: greedy continuations to train on (default 1024; --resume needs the same)",
    )
    p.add_argument(
        "--recipe",
        choices=("heldout", "general"),
        default="heldout",
        help="with --drafter: 'heldout' (the first recipe: train-stream prompts, cross-entropy) or "
        "'general' (the stdlib's tests and tools too, longer contexts, distilled on the target's "
        "logits, continued from the shipped drafter)",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted run from its last checkpoint"
    )
    add_train_tiny_arguments(p)
    p.set_defaults(out=None, distill_steps=None)


def main_train(args: argparse.Namespace) -> int:
    """`runner train --preset NAME`: one command per shipped checkpoint (or, with
    `--drafter block --model NAME`, its block drafter)."""
    if args.drafter or args.model:
        from .drafter_command import main_train_drafter

        return main_train_drafter(args)
    if args.preset is None:
        print("train: give --preset tiny|deep, or --drafter block --model tiny|deep", file=sys.stderr)
        return 2
    if args.preset == "tiny":
        if args.resume:
            print(
                "train: --resume is for --preset deep (tiny's recipe restarts from its saved checkpoint "
                "with --distill-only / --evaluate-only)",
                file=sys.stderr,
            )
            return 2
        args.out = args.out or DEFAULT_OUT
        args.distill_steps = DISTILL_STEPS if args.distill_steps is None else args.distill_steps
        return main_train_tiny(args, verb="train")
    from . import deep

    args.out = args.out or deep.DEFAULT_OUT
    args.distill_steps = deep.DISTILL_STEPS if args.distill_steps is None else args.distill_steps
    return main_train_tiny(args, verb="train", prepare=deep.run)


def main_train_tiny(args: argparse.Namespace, verb: str = "train-tiny", prepare=None) -> int:
    for flag in ("steps", "batch", "eval_prompts"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            print(f"{verb}: --{flag.replace('_', '-')} must be >= 1, got {value}", file=sys.stderr)
            return 2
    if args.distill_steps < 0 or (args.distill_only and not args.distill_steps):
        print(f"{verb}: --distill-only needs --distill-steps N with N >= 1", file=sys.stderr)
        return 2
    if not args.no_openblas:
        # Training's products are large: both cores' BLAS threads pay, unlike decode's.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(core_count()))
        blas.reexec_with_openblas(blas.argv_from(verb))
    from ..engine.checkpoint import CheckpointError
    from .corpus import CorpusError

    try:
        if not (args.evaluate_only or args.distill_only):
            (prepare or prepare_and_train)(args)
        if args.distill_steps and not args.evaluate_only and not _distilled(args):
            distill(args, verb)
        finish(args.out, args.eval_prompts)
    except (CorpusError, CheckpointError, RuntimeError, ValueError) as e:
        print(f"{verb}: {e}", file=sys.stderr)
        return 2
    return 0


def prepare_and_train(args: argparse.Namespace) -> None:
    import mlx.core as mx

    from ..engine.checkpoint import load_tokenizer
    from ..prompts import write_prompts
    from . import corpus, data, loop
    from .random_init import write_tokenizer

    started = time.time()
    manifest = args.manifest or corpus.MANIFEST
    root = corpus.stdlib_root()
    if args.rebuild_manifest:
        corpus.write_manifest(corpus.list_sources(root), root, manifest)
        print(f"train-tiny: wrote {manifest}", flush=True)
    files = corpus.verify(root, manifest)
    train_files, heldout_files = corpus.split(files)
    train_texts = [corpus.read_text(root, f) for f in train_files]
    heldout_texts = [(f.path, corpus.read_text(root, f)) for f in heldout_files]

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(out, train_texts, VOCAB_SIZE)
    tok = load_tokenizer(out)
    eos = tok.token_to_id(data.EOS_TOKEN)
    stream = data.encode_stream(tok, train_texts, eos)
    prompts = data.heldout_prompts(heldout_texts)
    write_prompts(prompts, out / "heldout.jsonl")

    cfg = loop.TrainConfig(seed=args.seed)
    if args.steps:
        cfg.steps = args.steps
    if args.batch:
        cfg.batch = args.batch
    config = loop.model_config(vocab, eos)
    model = loop.init_model(config, cfg.seed)
    sampler = data.BatchSampler(stream, cfg.batch, cfg.context, cfg.seed)
    recipe = {
        "command": " ".join(["runner", *blas.argv_from("train-tiny")]),
        "python": sys.version.split()[0],
        "mlx": mx.__version__,
        "machine": f"{platform.machine()} {cpu_name()}, {core_count()} cores",
        "blas": blas.describe(),
        "stdlib_root": str(root),
        "manifest": str(manifest.name),
        "train_files": len(train_files),
        "heldout_files": len(heldout_files),
        "train_bytes": sum(f.size for f in train_files),
        "heldout_bytes": sum(f.size for f in heldout_files),
        "train_tokens": int(len(stream)),
        "heldout_prompts": len(prompts),
        "vocab_size": vocab,
    }
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    print(
        f"train-tiny: {recipe['train_files']} train files, {recipe['train_tokens']} tokens, "
        f"{len(prompts)} held-out prompts; {recipe['blas']}",
        flush=True,
    )
    loop.train(model, config, sampler.next, cfg, out=out, log=lambda m: print(m, flush=True))
    recipe["train_wall_s"] = round(time.time() - started, 1)
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")


def _distilled(args: argparse.Namespace) -> bool:
    """A resumed run whose distillation already finished does not distil twice."""
    recipe = args.out / "recipe.json"
    return bool(
        getattr(args, "resume", False) and recipe.is_file() and "distill" in json.loads(recipe.read_text())
    )


def distill(args: argparse.Namespace, verb: str = "train-tiny") -> None:
    """Self-distil the MTP layer of the checkpoint in --out and save it in place."""
    from ..engine.checkpoint import load_model, load_tokenizer, read_args, save_checkpoint
    from . import corpus, data, loop
    from .distill import distill_mtp

    started = time.time()
    out: Path = args.out
    root = corpus.stdlib_root()
    train_files, _ = corpus.split(corpus.verify(root, args.manifest or corpus.MANIFEST))
    tok = load_tokenizer(out)
    stream = data.encode_stream(
        tok, [corpus.read_text(root, f) for f in train_files], tok.token_to_id(data.EOS_TOKEN)
    )
    model = load_model(out, read_args(out), with_mtp=True, with_indexer=True)
    cfg = loop.TrainConfig()
    loop.seed_everything(args.seed + 1)
    # Windows of context + 2 tokens; the distillation uses the first context + 1.
    sampler = data.BatchSampler(stream, args.batch or cfg.batch, cfg.context, args.seed + 1)
    losses = distill_mtp(
        model, lambda: sampler.next()[:, :-1], args.distill_steps, log=lambda m: print(m, flush=True)
    )
    config = json.loads((out / "config.json").read_text())
    save_checkpoint(model, config, out)
    recipe = json.loads((out / "recipe.json").read_text())
    before = json.loads((out / "eval.json").read_text()) if (out / "eval.json").is_file() else {}
    recipe["distill"] = {
        "mtp_acceptance_before": before.get("mtp_acceptance"),
        "steps": args.distill_steps,
        "batch": args.batch or cfg.batch,
        "seed": args.seed + 1,
        "first_kl": losses[0],
        "last_kl": losses[-1],
        "wall_s": round(time.time() - started, 1),
        "command": " ".join(["runner", *blas.argv_from(verb)]),
    }
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")


def finish(out: Path, eval_prompts: int | None) -> None:
    """Evaluate the checkpoint in `out` and write its model card."""
    from .card import write_card
    from .evaluate import evaluate

    results = evaluate(out, limit=eval_prompts, log=lambda m: print(m, flush=True))
    (out / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
    write_card(out)
    print(f"train-tiny: wrote {out / 'README.md'}", flush=True)
