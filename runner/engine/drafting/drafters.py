"""Building the drafter the engine knobs name (`mtp` + `drafter`): None when the engine
does not draft, else one behind drafter.py's interface. A block drafter also sets which
target layers' states the forward hands it (before anything is compiled)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..cache import BlockPool
from ..config import EngineConfig
from ..forward import Forward
from ..sequence import Sequence
from .block_drafting import BlockDrafting
from .drafter import Drafter
from .mtp import MTPDrafter


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
    drafting = BlockDrafting(
        forward.model, checkpoint_dir, config.compile, config.draft_tree, config.draft_lookup
    )
    forward.feature_layers = drafting.feature_layers
    return drafting
