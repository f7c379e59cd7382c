"""Resumable training: everything a run needs to go on after an interruption, written
atomically every checkpoint.

`<state_dir>/latest/` holds the model (the usual checkpoint files), the optimizer's
state (`optimizer/state.safetensors`: AdamW moments, step and learning rate), the batch
sampler's random state and the loss history (`state.json`). It is written to
`latest.tmp/` first and renamed, so an interruption while writing leaves the previous
one intact. A resumed run continues with the same batches and the same schedule as an
uninterrupted one. This file knows nothing about the corpus or the model card.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from ..engine.checkpoint import CheckpointError, load_model, read_args, save_checkpoint

LATEST = "latest"
OPTIMIZER = "optimizer/state.safetensors"


def save(state_dir: Path, model, config: dict, optimizer, rng, history: list[dict], meta: dict) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp, final = state_dir / f"{LATEST}.tmp", state_dir / LATEST
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(model, config, tmp)
    # In a subfolder: the checkpoint loader reads every *.safetensors beside config.json.
    (tmp / "optimizer").mkdir()
    mx.save_safetensors(str(tmp / OPTIMIZER), dict(tree_flatten(optimizer.state)))
    (tmp / "state.json").write_text(
        json.dumps(
            {"steps_done": len(history), "rng": rng.bit_generator.state, "meta": meta, "history": history}
        )
        + "\n"
    )
    old = state_dir / f"{LATEST}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def exists(state_dir: Path) -> bool:
    return (state_dir / LATEST / "state.json").is_file()


def load(state_dir: Path, meta: dict) -> tuple:
    """(model, optimizer state, rng state, history) of the last saved step. `meta` must
    match what was saved (the recipe's hyper-parameters): resuming under another recipe
    would silently train a different model."""
    d = state_dir / LATEST
    try:
        state = json.loads((d / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{d / 'state.json'}: cannot resume from it ({e})") from None
    if state.get("meta") != meta:
        raise CheckpointError(
            f"{d / 'state.json'}: saved by another recipe ({state.get('meta')}), "
            f"not {meta}; remove {state_dir} to start over"
        )
    legacy = d / "optimizer.safetensors"  # where the first deep run's code kept it
    if legacy.is_file():
        (d / "optimizer").mkdir(exist_ok=True)
        legacy.rename(d / OPTIMIZER)
    model = load_model(d, read_args(d), with_mtp=True, with_indexer=True, fuse=False)
    model.freeze(keys=["e_score_correction_bias"])
    opt_state = tree_unflatten(list(mx.load(str(d / OPTIMIZER)).items()))
    return model, opt_state, state["rng"], state["history"]


def clear(state_dir: Path) -> Optional[Path]:
    if state_dir.exists():
        shutil.rmtree(state_dir)
        return state_dir
    return None
