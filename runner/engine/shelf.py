"""Loaded models shared by the engines of one process (an experiment's arms).

- Each arm of a run starts its own engine on the same checkpoint. Most of an MTP engine's
  memory is not its weights but its compiled functions (a graph per traced decode shape,
  forward.py); arms whose engines load the same model (same checkpoint files, MTP layer,
  indexer and dtype) get one model and one set of compiled functions from the shelf, so
  a pass structure is traced once for all of them.
- Sharing changes no value: a compiled function is a pure function of its arrays, keyed by
  all its graph depends on (forward.py); the engines keep their own pools and state.
- Held weakly: a model and its functions go when the last engine using them goes.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import mlx.core as mx

from . import checkpoint as ckpt
from .config import ModelArgs
from .forward import CompiledPasses


class Shelf:
    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def load(
        self, directory: Path, args: ModelArgs, with_mtp: bool, with_indexer: bool, dtype: mx.Dtype
    ) -> CompiledPasses:
        """The model's compiled functions (their `.model` the model), loaded on first use."""
        files = tuple(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.glob("*.safetensors"))
        )  # a checkpoint rewritten in place is another model
        key = (str(directory.resolve()), files, with_mtp, with_indexer, str(dtype))
        passes = self._held.get(key)
        if passes is None:
            model = ckpt.load_model(
                directory, args, with_mtp=with_mtp, with_indexer=with_indexer, dtype=dtype
            )
            passes = CompiledPasses(model)
            self._held[key] = passes
        return passes

    def __len__(self) -> int:
        return len(self._held)
