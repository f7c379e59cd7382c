"""The runtimes an arm can be measured on, behind one interface (base.Runtime):

    bothrows        our engine (runner.engine), in-process
    mlx-lm          mlx-lm's own generation in-process (BatchGenerator; a draft model
                    serves one request at a time)
    mlx-lm-server   an mlx_lm.server the runner starts for the arm and always stops
    openai          a server the user runs, at base_url (streaming /v1/completions)

`start(runtime, knobs, checkpoint)` builds one from an arm's validated knobs (knobs.py);
each implementation is imported only when an arm uses it. The executor, the workload and
the store do not know which one is behind the interface; the engine imports nothing
from here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import Finished, Runtime, RuntimeFault
from .knobs import DEFAULT_RUNTIME, RUNTIMES

_CLASSES = {
    "bothrows": ("bothrows", "Bothrows"),
    "mlx-lm": ("mlxlm", "MlxLm"),
    "mlx-lm-server": ("server", "MlxLmServer"),
    "openai": ("openai", "OpenAI"),
}


def start(runtime: str, knobs: dict, checkpoint: Path, shelf=None) -> Runtime:
    """A started runtime for an arm. `knobs` are the arm's merged knobs: for bothrows the
    engine's (without "runtime"), for the others knobs.check()'s effective knobs. `shelf`
    (a runner.engine.shelf.Shelf): where bothrows engines share a loaded model and its
    compiled functions. Raises RuntimeFault when a server cannot be started."""
    module, cls = _CLASSES[runtime]
    impl = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    if runtime == DEFAULT_RUNTIME:
        return impl({k: v for k, v in knobs.items() if k != "runtime"}, checkpoint, shelf)
    return impl(knobs, checkpoint)


__all__ = ["DEFAULT_RUNTIME", "RUNTIMES", "Finished", "Runtime", "RuntimeFault", "start"]
