"""Building the drafter the engine knobs name (`mtp` + `drafter`): None when the engine
does not draft, else one behind drafter.py's interface."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from .cache import BlockPool
from .config import EngineConfig
from .drafter import Drafter
from .forward import Forward
from .mtp import MTPDrafter
from .sequence import Sequence


def make_drafter(
    config: EngineConfig,
    forward: Forward,
    pool: BlockPool,
    ensure_blocks: Callable[[Sequence, int], None],
    checkpoint_dir: Path,
) -> Optional[Drafter]:
    if not config.mtp:
        return None
    if config.drafter == "mtp":
        return MTPDrafter(forward, pool, config.mtp_sync, ensure_blocks)
    try:  # written alongside this interface (runner/engine/block_drafter.py)
        from .block_drafter import BlockDrafter  # type: ignore[import-not-found]
    except ImportError as e:
        raise ValueError(f'engine knob drafter: "block" is not built into this engine ({e})') from e
    return BlockDrafter(config, forward, pool, ensure_blocks, checkpoint_dir)
