"""The `deep` preset: a 16-layer checkpoint grown from the trained `tiny` one.

Phases, each resumable: grow tiny's 4 layers to 16 (`grow.py`: the same function at
step 0, so training starts from tiny's loss and tiny's MTP layer), continue training all
of it jointly (next-token + MTP + indexer, as tiny was trained) with periodic full-state
checkpoints, self-distil the MTP layer, evaluate and write the model card. The tokenizer
and held-out prompts are tiny's, copied, so every workload applies to both models.
`--resume` continues from the last checkpoint of an interrupted run.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .. import blas
from ..experiments.chip import core_count, cpu_name

MODELS = Path(__file__).resolve().parent.parent / "models"
SOURCE = MODELS / "tiny"
DEFAULT_OUT = MODELS / "deep"
LAYERS = 16
DISTILL_STEPS = 60
SHARED_FILES = ("tokenizer.json", "tokenizer_config.json", "heldout.jsonl")


def train_config(steps: int | None, batch: int | None, seed: int):
    from .loop import TrainConfig

    cfg = TrainConfig(
        steps=400, batch=16, context=256, peak_lr=1e-3, warmup=20, seed=seed, checkpoint_every=20, log_every=5
    )
    if steps:
        cfg.steps = steps
    if batch:
        cfg.batch = batch
    return cfg


def state_dir(out: Path) -> Path:
    return out / ".resume"


def run(args: argparse.Namespace) -> None:
    import mlx.core as mx

    from ..engine.checkpoint import CheckpointError, load_model, load_tokenizer, read_args
    from . import corpus, data, loop, resume
    from .grow import grow

    out: Path = args.out
    cfg = train_config(args.steps, args.batch, args.seed)
    meta = {"preset": "deep", "source": "tiny", "layers": LAYERS, "train_config": asdict(cfg)}
    states = state_dir(out)
    started = time.time()
    if resume.exists(states) and not args.resume:
        raise CheckpointError(
            f"{states}: an interrupted run's state is there; pass --resume to continue it "
            f"or remove the folder to start over"
        )
    if args.resume and not resume.exists(states):
        if (out / "recipe.json").is_file() and "train_wall_s" in json.loads(
            (out / "recipe.json").read_text()
        ):
            print(f"train: {out} finished training; going on with what is left", flush=True)
            return
        print(f"train: nothing to resume in {states}; starting from the beginning", flush=True)
    tok = load_tokenizer(SOURCE)
    root = corpus.stdlib_root()
    train_files, heldout_files = corpus.split(corpus.verify(root, args.manifest or corpus.MANIFEST))
    stream = data.encode_stream(
        tok, [corpus.read_text(root, f) for f in train_files], tok.token_to_id(data.EOS_TOKEN)
    )
    sampler = data.BatchSampler(stream, cfg.batch, cfg.context, cfg.seed + 2)
    restored = None
    if args.resume and resume.exists(states):
        model, opt_state, rng_state, history = resume.load(states, meta)
        sampler.rng.bit_generator.state = rng_state
        restored = (opt_state, history)
        config = json.loads((states / resume.LATEST / "config.json").read_text())
    else:
        source = load_model(SOURCE, read_args(SOURCE), with_mtp=True, with_indexer=True, fuse=False)
        loop.seed_everything(cfg.seed)
        model, overrides = grow(source, LAYERS)
        config = {**json.loads((SOURCE / "config.json").read_text()), **overrides}
        out.mkdir(parents=True, exist_ok=True)
        for name in SHARED_FILES:
            shutil.copyfile(SOURCE / name, out / name)
    recipe = {
        "command": " ".join(["runner", *blas.argv_from("train")]),
        "preset": "deep",
        "grown_from": "runner/models/tiny",
        "layers": LAYERS,
        "python": sys.version.split()[0],
        "mlx": mx.__version__,
        "machine": f"{platform.machine()} {cpu_name()}, {core_count()} cores",
        "blas": blas.describe(),
        "stdlib_root": str(root),
        "manifest": (args.manifest or corpus.MANIFEST).name,
        "train_files": len(train_files),
        "heldout_files": len(heldout_files),
        "train_bytes": sum(f.size for f in train_files),
        "heldout_bytes": sum(f.size for f in heldout_files),
        "heldout_prompts": sum(
            1 for line in (SOURCE / "heldout.jsonl").read_text().splitlines() if line.strip()
        ),
        "train_tokens": int(len(stream)),
        "vocab_size": config["vocab_size"],
        "sampler_seed": cfg.seed + 2,
    }
    print(
        f"train: deep ({LAYERS} layers grown from tiny), {cfg.steps} steps of {cfg.batch} x {cfg.context}; "
        f"{recipe['blas']}",
        flush=True,
    )
    resumable = loop.Resumable(states, sampler.rng, meta, restored)
    history = loop.train(
        model, config, sampler.next, cfg, out=out, log=lambda m: print(m, flush=True), resumable=resumable
    )
    # Across resumptions: the loop's clock carries on from the restored history.
    recipe["train_wall_s"] = round(
        history[-1]["elapsed_s"] + (time.time() - started if not restored else 0), 1
    )
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    resume.clear(states)
