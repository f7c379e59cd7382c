"""Model and engine configuration.

ModelArgs mirrors a GLM-4.5 MoE `config.json` (unknown keys are dropped, as HF configs
carry many we do not use). EngineConfig holds every engine knob, validated once; an
unknown or invalid knob raises ValueError naming it. The engine knows nothing about
experiments or storage.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, fields
from typing import Any, Optional

SUPPORTED_MODEL_TYPES = ("glm4_moe",)


@dataclass(slots=True)
class ModelArgs:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: Optional[int] = 1
    first_k_dense_replace: int = 1
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.5
    use_qk_norm: bool = False
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    num_nextn_predict_layers: int = 0
    eos_token_id: Any = None
    # Our own extension (indexer.safetensors); absent in upstream configs.
    index_n_heads: int = 0
    index_head_dim: int = 0

    @classmethod
    def from_dict(cls, cfg: dict, source: str = "config.json") -> "ModelArgs":
        mt = cfg.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"{source}: model_type {mt!r} is not supported (expected one of {SUPPORTED_MODEL_TYPES})"
            )
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in cfg.items() if k in names}
        missing = [f.name for f in fields(cls) if f.name not in known and f.default is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{source}: missing required keys {missing}")
        args = cls(**known)
        if args.num_attention_heads % args.num_key_value_heads:
            raise ValueError(f"{source}: num_attention_heads must be a multiple of num_key_value_heads")
        if args.n_routed_experts % max(args.n_group, 1):
            raise ValueError(f"{source}: n_routed_experts must be a multiple of n_group")
        return args

    @property
    def rope_dims(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        e = self.eos_token_id
        if e is None:
            return ()
        return tuple(e) if isinstance(e, (list, tuple)) else (int(e),)


DRAFT_POLICIES = ("never", "always", "solo", "adaptive")  # plus "max_width:N"
MTP_SYNC = ("eager", "lazy")
DRAFTERS = ("mtp", "block")
MAX_DRAFT_TOKENS = 16
MAX_TREE_LEAVES = 2  # branch leaves a draft tree may add: second choices at the first two positions
MAX_LOOKUP_MATCH = 4  # the longest suffix a row's drafts are looked up by (drafting/lookup.py)
DTYPES = ("float32", "bfloat16", "float16")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_bytes(value: Any, knob: str = "prefix_cache_bytes") -> int:
    """Accept 1048576, "64MB", "1.5GiB"; reject anything else naming the knob."""
    if isinstance(value, bool):
        raise ValueError(f"{knob}: expected a byte size, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{knob}: must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        m = _SIZE.match(value)
        unit = m.group(2).upper() if m else None
        if m and unit in _UNITS:
            return int(float(m.group(1)) * _UNITS[unit])
    raise ValueError(f"{knob}: expected bytes as an int or a string like '64MB', got {value!r}")


@dataclass(slots=True)
class EngineConfig:
    """Every engine knob. Validated in __post_init__; classes copy what they need.

    max_pass_tokens: a per-pass token budget (Sarathi-Serve's stall-free batching, vLLM's
    max_num_batched_tokens); 0 or None: no budget. Decode rows are scheduled first (1
    token each, 2 with a draft), then prefill chunks, each cut to the budget left and to
    prefill_chunk. The budget never starves decoding: decode rows all run even when they
    alone exceed it (that pass then schedules no prefill), and a pass without decode
    rows always prefills at least one token.

    prefill_hold: passes a request with a free slot may wait while rows are decoding, so
    that prompts arriving apart prefill together once those rows finish (or the hold runs
    out) instead of one by one, each stalling the decoding rows (scheduler.py); 0: admit
    at once. It trades the waiting request's time to first token, by at most that many
    passes, for fewer stalls and batched prefills.
    """

    max_batch_size: int = 4
    prefill_chunk: int = 256
    max_pass_tokens: Optional[int] = 0  # 0 or None: no per-pass token budget
    prefill_hold: int = 0  # passes a request may wait for decoding rows to finish (0: none)
    dtype: str = "float32"
    mtp: bool = False  # draft (with `drafter`); the name is the depth-1 MTP drafting's
    draft_policy: str = "always"
    draft_tokens: int = 1  # k: drafts a drafting row carries into a pass (1..MAX_DRAFT_TOKENS)
    drafter: str = "mtp"  # "mtp": the MTP layer chained k times; "block": a block drafter
    draft_tree: int = 0  # a lone greedy row's extra branch leaves (block drafter, 0..MAX_TREE_LEAVES)
    draft_lookup: int = 0  # a greedy row whose last n >= this many tokens occurred before drafts
    # what followed them there, without the block drafter's pass (drafting/lookup.py; 0: never)
    mtp_sync: str = "eager"
    prefix_cache_bytes: Any = 0
    index_topk: int = 0  # 0: dense attention; >0 needs indexer weights
    prefill_offload: bool = False  # Apple Neural Engine offload: not on this hardware
    kv_block_size: int = 16  # tokens per KV block (paging and prefix-cache unit)
    compile: bool = True  # mx.compile the forward pass
    pipeline: bool = True  # queue the next decode pass before reading this one's tokens
    seed: int = 0  # sampling seed when a request gives none

    @property
    def mtp_layer(self) -> bool:
        """Whether the engine runs the checkpoint's MTP layer (it drafts with it)."""
        return self.mtp and self.drafter == "mtp"

    def __post_init__(self) -> None:
        def bad(knob: str, why: str) -> ValueError:
            return ValueError(f"engine knob {knob}: {why}")

        for knob in ("max_batch_size", "prefill_chunk", "kv_block_size"):
            v = getattr(self, knob)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(knob, f"expected a positive integer, got {v!r}")
        if self.max_pass_tokens is None:
            self.max_pass_tokens = 0
        v = self.max_pass_tokens
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad("max_pass_tokens", f"expected an integer >= 1, or 0 for no budget, got {v!r}")
        v = self.prefill_hold
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad("prefill_hold", f"expected an integer >= 0 (passes; 0: admit at once), got {v!r}")
        if isinstance(self.index_topk, bool) or not isinstance(self.index_topk, int) or self.index_topk < 0:
            raise bad("index_topk", f"expected an integer >= 0, got {self.index_topk!r}")
        if self.dtype not in DTYPES:
            raise bad("dtype", f"expected one of {DTYPES}, got {self.dtype!r}")
        for knob in ("mtp", "prefill_offload", "compile", "pipeline"):
            if not isinstance(getattr(self, knob), bool):
                raise bad(knob, f"expected true or false, got {getattr(self, knob)!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise bad("seed", f"expected an integer, got {self.seed!r}")
        self.draft_max_width  # validates draft_policy
        k = self.draft_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFT_TOKENS:
            raise bad("draft_tokens", f"expected an integer from 1 to {MAX_DRAFT_TOKENS}, got {k!r}")
        if self.drafter not in DRAFTERS:
            raise bad("drafter", f"expected one of {DRAFTERS}, got {self.drafter!r}")
        t = self.draft_tree
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= MAX_TREE_LEAVES:
            raise bad("draft_tree", f"expected an integer from 0 to {MAX_TREE_LEAVES}, got {t!r}")
        n = self.draft_lookup
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_LOOKUP_MATCH:
            raise bad(
                "draft_lookup",
                f"expected an integer from 1 to {MAX_LOOKUP_MATCH} (tokens a match needs), "
                f"or 0 for none, got {n!r}",
            )
        if self.mtp_sync not in MTP_SYNC:
            raise bad("mtp_sync", f"expected one of {MTP_SYNC}, got {self.mtp_sync!r}")
        self.prefix_cache_bytes = parse_bytes(self.prefix_cache_bytes)
        if self.prefill_offload:
            raise bad(
                "prefill_offload",
                "offloading prefill to Apple's Neural Engine is not "
                "available: this engine runs MLX on the CPU/GPU only and has no ANE path",
            )

    def check_together(self) -> None:
        """Knobs valid one by one that do not go together (a declaration checks each knob
        alone first, then the whole set)."""
        if self.draft_tree and self.drafter != "block":
            raise ValueError(
                f"engine knob draft_tree: a draft tree needs drafter = 'block', got {self.drafter!r}"
            )
        if self.draft_lookup and self.drafter != "block":
            raise ValueError(
                f"engine knob draft_lookup: looked-up drafts need drafter = 'block', got {self.drafter!r}"
            )
        if self.draft_tree and self.index_topk:
            raise ValueError(
                "engine knob draft_tree: a draft tree needs index_topk = 0 (the indexer picks keys in order)"
            )

    @property
    def draft_max_width(self) -> Optional[int]:
        """The widest pass that may draft under a fixed policy (None: no fixed limit)."""
        p = self.draft_policy
        if not isinstance(p, str):
            raise ValueError(f"engine knob draft_policy: expected a string, got {p!r}")
        if p == "never":
            return 0
        if p == "solo":
            return 1
        if p in ("always", "adaptive"):
            return None
        m = re.fullmatch(r"max_width:(\d+)", p)
        if m and int(m.group(1)) >= 1:
            return int(m.group(1))
        raise ValueError(
            f"engine knob draft_policy: expected one of {DRAFT_POLICIES} or "
            f"'max_width:N' with N >= 1, got {p!r}"
        )

    @classmethod
    def from_kwargs(cls, **knobs: Any) -> "EngineConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(knobs) - names)
        if unknown:
            raise ValueError(f"unknown engine knob(s) {unknown}; known: {sorted(names)}")
        return cls(**knobs)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
