"""The block-diffusion drafter (DFlash-style): k draft tokens a row from one pass.

- A few bidirectional decoder layers. Keys and values: the committed context's target
  hidden states from a few spread layers (concatenated, one linear, RMSNorm), plus the
  block's own rows. Queries: the block only, `[last committed token, mask x k]` at
  positions n..n+k. No causal mask inside the block.
- Block position i predicts token n+i through the target's own final norm and head
  (shared, never copied). The anchor's output is discarded.
- A drafting pass (drafter_pass.py) is a pure function of the weights, a cached context
  (drafter_context.py's `ContextCache`, accepted positions only) and the anchors.
- Weights live in `<checkpoint>/block_drafter/` (safetensors + JSON config), a folder
  neither mlx-lm nor the target's loader reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from ..checkpoint import CheckpointError
from ..layers.moe import MLP

DRAFTER_DIR = "block_drafter"
WEIGHTS_FILE = "block_drafter.safetensors"
CONFIG_FILE = "block_drafter.json"
EVAL_FILE = "eval.json"  # the drafter's evaluation (runner train): adaptive starts from its acceptance
DRAFTER_FILES = tuple(
    f"{DRAFTER_DIR}/{f}" for f in (CONFIG_FILE, WEIGHTS_FILE, EVAL_FILE)
)  # what a run loads


class DrafterError(CheckpointError):
    """A block drafter that cannot be loaded; the message names the checkpoint and file."""


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int  # the target's
    target_layers: tuple[int, ...]  # target states read: j < L is layer j's normed input, L the final hidden
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 512
    block_size: int = 8  # k it was trained for (propose takes any k >= 1)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    context_window: int = 0  # the most context positions a block reads (0: all): the
    # longest context it was trained on, so a long row's context stays in its range

    @property
    def feature_width(self) -> int:
        """Width of a position's context features: the target states read, concatenated."""
        return len(self.target_layers) * self.hidden_size

    @staticmethod
    def from_dict(d: dict, source: str) -> "DrafterConfig":
        known = {f.name for f in fields(DrafterConfig)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise DrafterError(f"{source}: unknown field(s) {unknown}")
        try:
            cfg = DrafterConfig(**{**d, "target_layers": tuple(int(i) for i in d["target_layers"])})
        except (KeyError, TypeError, ValueError) as e:
            raise DrafterError(f"{source}: invalid drafter config ({e})") from None
        return cfg


def spread_layers(num_hidden_layers: int, n: int = 4) -> tuple[int, ...]:
    """n target states spread from after the first layer to the final hidden."""
    n = min(n, num_hidden_layers)
    return tuple(sorted({round(1 + i * (num_hidden_layers - 1) / max(n - 1, 1)) for i in range(n)}))


def select_features(normed: list, final: mx.array, layers: tuple[int, ...]) -> mx.array:
    """A target forward's states -> drafter context features (..., len(layers) * H).
    normed: each main layer's input_layernorm output (the engine's `Capture.normed`);
    final: the hidden after the final norm."""
    return mx.concatenate([final if j == len(normed) else normed[j] for j in layers], axis=-1)


def rope_tables(positions: mx.array, theta: float, dim: int) -> tuple[mx.array, mx.array]:
    """Rotate-half RoPE over a whole head of `dim`: (cos, sin), each (B, 1, T, dim / 2)."""
    half = dim // 2
    freqs = theta ** (-mx.arange(0, half, dtype=mx.float32) / half)
    ang = positions.astype(mx.float32)[:, None, :, None] * freqs
    return mx.cos(ang), mx.sin(ang)


def rotate(x: mx.array, tables: tuple[mx.array, mx.array]) -> mx.array:
    """x (B, heads, T, D) rotated by rope_tables' (cos, sin)."""
    (cos, sin), half = tables, x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return mx.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def block_mask(visible: mx.array, T: int, dtype) -> mx.array:
    """visible (B, 1, S) context keys each block may read -> the additive (B, 1, T, S + T)
    mask of a block of T rows, which reads all of itself."""
    B, S = visible.shape[0], visible.shape[-1]
    allowed = mx.concatenate([mx.broadcast_to(visible, (B, T, S)), mx.ones((B, T, T), mx.bool_)], -1)
    return mx.where(allowed, 0.0, -1e9)[:, None].astype(dtype)


class DrafterAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        H, D = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.q_proj = nn.Linear(H, cfg.num_heads * D, bias=False)
        self.k_proj = nn.Linear(H, cfg.num_kv_heads * D, bias=False)
        self.v_proj = nn.Linear(H, cfg.num_kv_heads * D, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * D, H, bias=False)
        self.q_norm = nn.RMSNorm(D, eps=cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(D, eps=cfg.rms_norm_eps)

    def _heads(self, x: mx.array, n: int) -> mx.array:
        B, T, _ = x.shape
        return x.reshape(B, T, n, self.cfg.head_dim).transpose(0, 2, 1, 3)

    def kv(self, x: mx.array, positions: mx.array) -> tuple[mx.array, mx.array]:
        """x (B, S, H) at positions (B, S) -> keys, values (B, kv_heads, S, D)."""
        k = self.k_norm(self._heads(self.k_proj(x), self.cfg.num_kv_heads))
        k = rotate(k, rope_tables(positions, self.cfg.rope_theta, self.cfg.head_dim))
        return k, self._heads(self.v_proj(x), self.cfg.num_kv_heads)

    def __call__(self, x, positions, ctx_k, ctx_v, visible) -> mx.array:
        """x (B, T, H) block rows; ctx_k/v (B, kv, S, D); visible (B, 1, S) bool: context
        keys each block may read. The block reads all of itself."""
        B, T, _ = x.shape
        q = self.q_norm(self._heads(self.q_proj(x), self.cfg.num_heads))
        q = rotate(q, rope_tables(positions, self.cfg.rope_theta, self.cfg.head_dim))
        bk, bv = self.kv(x, positions)
        keys, values = mx.concatenate([ctx_k, bk], axis=2), mx.concatenate([ctx_v, bv], axis=2)
        mask = block_mask(visible, T, q.dtype)
        out = mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.cfg.head_dim**-0.5, mask=mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, T, -1))


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.self_attn = DrafterAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def __call__(self, x, positions, ctx_k, ctx_v, visible) -> mx.array:
        h = x + self.self_attn(self.input_layernorm(x), positions, ctx_k, ctx_v, visible)
        return h + self.mlp(self.post_attention_layernorm(h))


LayerContext = list  # per drafter layer: (keys, values), each (B, kv_heads, S, D)


class BlockDrafter(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.feature_width, cfg.hidden_size, bias=False)
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mask_embedding = mx.random.normal((cfg.hidden_size,)) * 0.02
        self.layers = [DrafterLayer(cfg) for _ in range(cfg.num_layers)]

    def context(self, features: mx.array, positions: mx.array) -> LayerContext:
        """Target features (B, S, n*H) at positions (B, S) -> each layer's keys and values."""
        c = self.hidden_norm(self.fc(features))
        return [layer.self_attn.kv(c, positions) for layer in self.layers]

    def __call__(
        self, block: mx.array, positions: mx.array, ctx: LayerContext, visible: mx.array
    ) -> mx.array:
        """block (B, T, H) input rows at positions (B, T) -> drafter hidden (B, T, H)."""
        h = block
        for layer, (k, v) in zip(self.layers, ctx):
            h = layer(h, positions, k, v, visible)
        return h

    def block_inputs(self, target, anchors: mx.array, k: int) -> mx.array:
        """anchors (B,) last committed tokens -> (B, k + 1, H): the anchor's target embedding,
        then k mask embeddings."""
        first = target.embed_tokens(anchors)[:, None]
        masks = mx.broadcast_to(
            self.mask_embedding.astype(first.dtype), (anchors.shape[0], k, first.shape[-1])
        )
        return mx.concatenate([first, masks], axis=1)


def draft_logits(target, hidden: mx.array) -> mx.array:
    """Drafter hidden (..., H) -> logits through the target's final norm and head."""
    return target.head(target.norm(hidden))


def drafter_dir(checkpoint: Path) -> Path:
    return Path(checkpoint) / DRAFTER_DIR


def has_block_drafter(checkpoint: Path) -> bool:
    return (drafter_dir(checkpoint) / WEIGHTS_FILE).is_file()


def save_block_drafter(drafter: BlockDrafter, directory: Path) -> None:
    """Write block_drafter.json + block_drafter.safetensors into `directory` (a
    checkpoint's block_drafter/ folder, or a training state folder)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(asdict(drafter.cfg), indent=2, sort_keys=True) + "\n")
    mx.save_safetensors(str(directory / WEIGHTS_FILE), dict(tree_flatten(drafter.parameters())))


def measured_acceptance(checkpoint: Path) -> tuple[float, ...]:
    """The share of rows whose draft i was accepted in the drafter's own evaluation
    (eval.json's `acceptance_at`, i = 1..k); () when the checkpoint has no evaluation. A
    malformed one is a DrafterError naming the file and the field."""
    f = drafter_dir(checkpoint) / EVAL_FILE
    if not f.is_file():
        return ()
    try:
        shares = tuple(float(x) for x in json.loads(f.read_text()).get("acceptance_at", []))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as e:
        raise DrafterError(
            f"checkpoint {checkpoint}: {f}: 'acceptance_at' is not a list of shares ({e})"
        ) from None
    if not all(0.0 <= x <= 1.0 for x in shares):
        raise DrafterError(f"checkpoint {checkpoint}: {f}: 'acceptance_at' holds a share outside 0..1")
    return shares


def load_checkpoint_drafter(checkpoint: Path, target_args=None) -> BlockDrafter:
    """The block drafter shipped with a checkpoint directory (DrafterError if none)."""
    return load_block_drafter(drafter_dir(checkpoint), target_args, name=str(checkpoint))


def load_block_drafter(directory: Path, target_args=None, name: Optional[str] = None) -> BlockDrafter:
    """The drafter saved in `directory`; with target_args, checked against the target.
    Any problem is one DrafterError naming the checkpoint and the file."""
    where = name or str(directory.parent)
    cfg_file, w_file = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for f in (w_file, cfg_file):
        if not f.is_file():
            raise DrafterError(f"checkpoint {where}: no block drafter ({f} missing)")
    try:
        cfg = DrafterConfig.from_dict(json.loads(cfg_file.read_text()), str(cfg_file))
    except json.JSONDecodeError as e:
        raise DrafterError(f"checkpoint {where}: {cfg_file}: not valid JSON ({e})") from None
    if target_args is not None:
        L = target_args.num_hidden_layers
        if cfg.hidden_size != target_args.hidden_size or not all(0 <= j <= L for j in cfg.target_layers):
            raise DrafterError(
                f"checkpoint {where}: {cfg_file}: hidden_size {cfg.hidden_size} / target_layers "
                f"{list(cfg.target_layers)} do not fit a target of hidden_size "
                f"{target_args.hidden_size} with {L} layers"
            )
    try:
        weights = mx.load(str(w_file))
    except Exception as e:  # MLX raises plain exceptions for truncated/corrupt files
        raise DrafterError(f"checkpoint {where}: {w_file}: cannot read safetensors ({e})") from None
    drafter = BlockDrafter(cfg)
    expected = dict(tree_flatten(drafter.parameters()))
    problems = [f"missing tensor {n}" for n in expected if n not in weights]
    problems += [f"unexpected tensor {n}" for n in weights if n not in expected]
    problems += [
        f"tensor {n} has shape {tuple(weights[n].shape)}, expected {tuple(a.shape)}"
        for n, a in expected.items()
        if n in weights and weights[n].shape != a.shape
    ]
    if problems:
        raise DrafterError(f"checkpoint {where}: {w_file}: " + "; ".join(problems))
    drafter.update(tree_unflatten([(n, weights[n].astype(mx.float32)) for n in expected]))
    mx.eval(drafter.parameters())
    return drafter
