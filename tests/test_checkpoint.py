"""Bad checkpoints get one clear error naming the file and the tensor; the MTP layer is
kept by us and dropped by mlx-lm; names round-trip."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import pytest

from runner.engine import Engine
from runner.engine.checkpoint import CheckpointError, checkpoint_sha256, load_model, read_args
from runner.train.random_init import write_random_checkpoint


@pytest.fixture()
def ckpt(tmp_path, tiny_checkpoint):
    d = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, d)
    return d


def test_unknown_model_type(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = "llama"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config.json: model_type 'llama' is not supported"):
        Engine.from_pretrained(ckpt)


def test_missing_tensor_names_file_and_tensor(ckpt):
    w = mx.load(str(ckpt / "model.safetensors"))
    del w["model.layers.1.mlp.experts.3.up_proj.weight"]
    mx.save_safetensors(str(ckpt / "model.safetensors"), w)
    with pytest.raises(CheckpointError, match=r"model.safetensors: .*experts\.3\.up_proj"):
        Engine.from_pretrained(ckpt)


def test_misshaped_tensor(ckpt):
    w = mx.load(str(ckpt / "model.safetensors"))
    w["model.layers.0.self_attn.q_proj.weight"] = mx.zeros((3, 3))
    mx.save_safetensors(str(ckpt / "model.safetensors"), w)
    with pytest.raises(
        CheckpointError,
        match=r"model.safetensors: tensor model.layers.0.self_attn.q_proj.weight has shape \(3, 3\)",
    ):
        Engine.from_pretrained(ckpt)


def test_corrupt_file(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(CheckpointError, match=r"model.safetensors: cannot read safetensors"):
        Engine.from_pretrained(ckpt)


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        Engine.from_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"config.json: missing"):
        Engine.from_pretrained(tmp_path / "empty")


def test_mtp_layer_is_loaded_and_kept(tiny_checkpoint):
    args = read_args(tiny_checkpoint)
    raw = mx.load(str(tiny_checkpoint / "model.safetensors"))
    mtp_names = [k for k in raw if k.startswith(f"model.layers.{args.num_hidden_layers}.")]
    assert any("eh_proj" in k for k in mtp_names) and any("shared_head.norm" in k for k in mtp_names)
    model = load_model(tiny_checkpoint, args, with_mtp=True, with_indexer=False)
    assert mx.array_equal(
        model.mtp.eh_proj.weight, raw[f"model.layers.{args.num_hidden_layers}.eh_proj.weight"]
    )


def test_checkpoint_hash_changes_with_bytes(tmp_path):
    a = write_random_checkpoint(tmp_path / "a", seed=1)
    b = write_random_checkpoint(tmp_path / "b", seed=1)
    assert checkpoint_sha256(a) == checkpoint_sha256(b)
    c = write_random_checkpoint(tmp_path / "c", seed=2)
    assert checkpoint_sha256(a) != checkpoint_sha256(c)


def test_a_block_drafting_runs_model_hash_covers_its_drafter_and_no_other_run_sees_it(tmp_path):
    """A retrained drafter is a different model for the runs that load it (runner run
    passes DRAFTER_FILES for block-drafting arms); without drafter files, or for a run
    that does not ask for them, the checkpoint's hash is unchanged."""
    from runner.engine.drafting.block_drafter import DRAFTER_DIR, DRAFTER_FILES

    a = write_random_checkpoint(tmp_path / "a", seed=1)
    plain = checkpoint_sha256(a)
    assert checkpoint_sha256(a, DRAFTER_FILES) == plain  # no drafter: nothing to add
    (a / DRAFTER_DIR).mkdir()
    for name in DRAFTER_FILES:
        (a / name).write_bytes(b"first drafter")
    first = checkpoint_sha256(a, DRAFTER_FILES)
    assert first != plain and checkpoint_sha256(a) == plain
    (a / DRAFTER_FILES[1]).write_bytes(b"retrained drafter")
    assert checkpoint_sha256(a, DRAFTER_FILES) not in (first, plain) and checkpoint_sha256(a) == plain


def test_bad_requests_are_refused_with_the_field_named(tiny_checkpoint):
    eng = Engine.from_pretrained(tiny_checkpoint, compile=False)
    for kwargs, field in [
        (dict(prompt_ids=[], max_new_tokens=4), "prompt_ids"),
        (dict(prompt_ids=[1], max_new_tokens=0), "max_new_tokens"),
        (dict(prompt_ids=[10**6], max_new_tokens=4), "outside the vocabulary"),
        (dict(prompt_ids=[1], max_new_tokens=10**6), "max_position_embeddings"),
        (dict(prompt_ids=[1], max_new_tokens=4, top_p=0.0), "top_p"),
    ]:
        with pytest.raises(ValueError, match=field):
            eng.add_request(**kwargs)
    assert not eng.has_work()
