"""Hugging Face GLM-4.5 MoE directories <-> our Model.

The one place where checkpoint names are mapped: per-expert tensors are stacked on load
(and split on save), the MTP layer at `model.layers.{num_hidden_layers}.*` becomes
`mtp.*`, and our indexer weights live in a separate `indexer.safetensors` so that
mlx-lm still loads the directory. Every problem names the file and the tensor.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .config import EngineConfig, ModelArgs
from .model import Model, fuse_for_inference

SHIPPED = Path(__file__).resolve().parent.parent / "models"
INDEXER_FILE = "indexer.safetensors"
BLOCK_DRAFTER_FILE = (
    "block_drafter/block_drafter.safetensors"  # its own folder: mlx-lm still loads the directory
)
_EXPERT = re.compile(r"^(.*\.mlp)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
# Tensors some upstream checkpoints carry that we deliberately do not use.
_IGNORED = re.compile(r"(rotary_emb\.inv_freq$|^mtp\.(embed_tokens|shared_head\.head)\.weight$)")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names file and tensor."""


def resolve_checkpoint(path: str | Path) -> Path:
    """ "tiny" (or any name of a shipped model) -> runner/models/<name>; else a path."""
    p = Path(path)
    if not p.exists() and (SHIPPED / str(path)).is_dir():
        return SHIPPED / str(path)
    return p


def read_args(directory: Path) -> ModelArgs:
    cfg_file = directory / "config.json"
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: checkpoint directory not found")
    try:
        cfg = json.loads(cfg_file.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{cfg_file}: missing") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg_file}: not valid JSON ({e})") from None
    try:
        return ModelArgs.from_dict(cfg, source=str(cfg_file))
    except (TypeError, ValueError) as e:
        raise CheckpointError(str(e)) from None


def has_indexer(directory: Path) -> bool:
    return (directory / INDEXER_FILE).is_file()


def has_block_drafter(directory: Path) -> bool:
    return (directory / BLOCK_DRAFTER_FILE).is_file()


def to_hf_name(name: str, args: ModelArgs) -> str:
    if name.startswith("mtp."):
        name = name.replace("mtp.shared_head_norm.", "mtp.shared_head.norm.")
        return f"model.layers.{args.num_hidden_layers}." + name[len("mtp.") :]
    if name.startswith("lm_head."):
        return name
    return "model." + name


def from_hf_name(name: str, args: ModelArgs) -> str:
    mtp_prefix = f"model.layers.{args.num_hidden_layers}."
    if name.startswith(mtp_prefix):
        name = "mtp." + name[len(mtp_prefix) :]
        return name.replace("mtp.shared_head.norm.", "mtp.shared_head_norm.")
    return name[len("model.") :] if name.startswith("model.") else name


def _load_file(f: Path) -> dict[str, mx.array]:
    try:
        return mx.load(str(f))
    except Exception as e:  # MLX raises plain exceptions for truncated/corrupt files
        raise CheckpointError(f"{f}: cannot read safetensors ({e})") from None


def _stack_experts(
    raw: dict[str, tuple[mx.array, Path]], args: ModelArgs
) -> dict[str, tuple[mx.array, Path]]:
    """HF per-expert weights -> one (E, out, in) array per projection."""
    out, groups = {}, {}
    for name, (arr, f) in raw.items():
        m = _EXPERT.match(name)
        if m:
            groups.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = (arr, f)
        else:
            out[name] = (arr, f)
    for (prefix, proj), experts in groups.items():
        ids = sorted(experts)
        f = experts[ids[0]][1]
        missing = sorted(set(range(args.n_routed_experts)) - set(ids))
        if missing or ids[-1] >= args.n_routed_experts:
            names = [to_hf_name(f"{prefix}.experts.{e}.{proj}.weight", args) for e in missing]
            raise CheckpointError(
                f"{f}: missing tensor(s) {names}"
                if missing
                else f"{f}: {prefix}.experts.{ids[-1]}: more experts than n_routed_experts"
            )
        out[f"{prefix}.experts.{proj}"] = (mx.stack([experts[i][0] for i in ids]), f)
    return out


def load_model(
    directory: Path,
    args: ModelArgs,
    with_mtp: bool,
    with_indexer: bool,
    dtype: mx.Dtype = mx.float32,
    fuse: bool = True,
) -> Model:
    files = sorted(p for p in directory.glob("*.safetensors") if p.name != INDEXER_FILE)
    if not files:
        raise CheckpointError(f"{directory}: no *.safetensors weights found")
    if with_indexer:
        if not has_indexer(directory):
            raise CheckpointError(f"{directory / INDEXER_FILE}: missing (index_topk needs indexer weights)")
        files.append(directory / INDEXER_FILE)
    raw: dict[str, tuple[mx.array, Path]] = {}
    for f in files:
        for name, arr in _load_file(f).items():
            raw[from_hf_name(name, args)] = (arr, f)
    weights = _stack_experts(raw, args)
    model = Model(args, with_mtp=with_mtp, with_indexer=with_indexer)
    expected = dict(tree_flatten(model.parameters()))
    problems = []
    for name, ref in expected.items():
        if name not in weights:
            problems.append(
                f"{files[0] if 'indexer' not in name else directory / INDEXER_FILE}: "
                f"missing tensor {to_hf_name(name, args)}"
            )
        elif weights[name][0].shape != ref.shape:
            arr, f = weights[name]
            problems.append(
                f"{f}: tensor {to_hf_name(name, args)} has shape {tuple(arr.shape)}, "
                f"expected {tuple(ref.shape)}"
            )
    mtp_prefix = "mtp."
    for name, (arr, f) in weights.items():
        if (
            name not in expected
            and not _IGNORED.search(name)
            and not (name.startswith(mtp_prefix) and not with_mtp)
        ):
            problems.append(f"{f}: unexpected tensor {to_hf_name(name, args)}")
    if problems:
        raise CheckpointError("; ".join(problems))
    cast = {
        n: (weights[n][0] if "e_score_correction_bias" in n else weights[n][0].astype(dtype))
        for n in expected
    }
    model.update(tree_unflatten(list(cast.items())))
    mx.eval(model.parameters())
    if fuse:
        fuse_for_inference(model)
    return model


def save_checkpoint(model: Model, config: dict, directory: Path) -> None:
    """Write config.json, model.safetensors (main + MTP) and indexer.safetensors (if any)."""
    directory.mkdir(parents=True, exist_ok=True)
    args = model.args
    main, index = {}, {}
    for name, arr in tree_flatten(model.parameters()):
        target = index if ".indexer." in name else main
        m = re.match(r"^(.*\.mlp)\.experts\.(gate_proj|up_proj|down_proj)$", name)
        if m:
            for e in range(arr.shape[0]):
                target[to_hf_name(f"{m.group(1)}.experts.{e}.{m.group(2)}.weight", args)] = arr[e]
        else:
            target[to_hf_name(name, args)] = arr
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    mx.save_safetensors(str(directory / "model.safetensors"), main, metadata={"format": "mlx"})
    if index:
        mx.save_safetensors(str(directory / INDEXER_FILE), index, metadata={"format": "mlx"})


HASHED = ("config.json", "tokenizer.json", "tokenizer_config.json", "heldout.jsonl")


def checkpoint_sha256(directory: Path, extra: tuple[str, ...] = ()) -> str:
    """sha256 over what a run depends on (names and bytes, sorted): config, weights,
    tokenizer and held-out prompts, and the `extra` files (paths inside the directory; a
    block-drafting run adds its drafter's, its evaluation included since the adaptive
    policy starts from it, so a retrained or re-evaluated drafter is a different model for
    it, while runs that never load the drafter keep the checkpoint's hash; a missing extra
    file is skipped). Model cards and training logs are not hashed, so re-documenting a
    checkpoint does not make it a different model."""
    h = hashlib.sha256()
    files = [
        p for p in directory.iterdir() if p.is_file() and (p.name in HASHED or p.suffix == ".safetensors")
    ]
    files += [directory / e for e in extra if (directory / e).is_file()]
    for f in sorted(files):
        h.update(f.relative_to(directory).as_posix().encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def eos_ids(directory: Path, args: ModelArgs, tokenizer) -> tuple[int, ...]:
    if args.eos_ids:
        return args.eos_ids
    tc = directory / "tokenizer_config.json"
    if tc.is_file():
        tok = json.loads(tc.read_text()).get("eos_token")
        tok = tok.get("content") if isinstance(tok, dict) else tok
        if tok is not None and tokenizer.token_to_id(tok) is not None:
            return (tokenizer.token_to_id(tok),)
    return ()


def load_tokenizer(directory: Path):
    from tokenizers import Tokenizer

    f = directory / "tokenizer.json"
    try:
        return Tokenizer.from_file(str(f))
    except Exception as e:
        raise CheckpointError(f"{f}: cannot load tokenizer ({e})") from None


def check_knobs(directory: Path, args: ModelArgs, config: EngineConfig) -> None:
    """Engine knobs that need something this checkpoint may lack, or each other: one
    clear error."""
    config.check_together()
    if config.index_topk and not has_indexer(directory):
        raise ValueError(
            f"engine knob index_topk: {directory} has no indexer weights ({INDEXER_FILE}); use index_topk = 0"
        )
    if config.index_topk and not args.index_n_heads:
        raise ValueError(f"engine knob index_topk: {directory}/config.json sets no index_n_heads")
    if config.drafter == "block" and not has_block_drafter(directory):
        raise ValueError(
            f"engine knob drafter: {directory} has no block drafter ({BLOCK_DRAFTER_FILE}); "
            'use drafter = "mtp" or train one with runner train --drafter block'
        )
    if config.mtp and config.drafter == "mtp" and args.num_nextn_predict_layers < 1:
        raise ValueError(
            f"engine knob mtp: {directory}/config.json has num_nextn_predict_layers = 0 "
            "(no MTP layer to draft with)"
        )
