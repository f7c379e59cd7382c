"""The deep preset's parts: growing depth keeps the function, and an interrupted run
resumes to exactly the state an uninterrupted one reaches."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from runner.cli import main as cli_main
from runner.engine.checkpoint import CheckpointError
from runner.prompts import read_prompts
from runner.train import data, loop, resume
from runner.train.grow import grow, layer_sources
from runner.train.random_init import BASE_CONFIG

SMALL = dict(vocab_size=64, eos_token_id=0, num_hidden_layers=3)


def small_model(seed: int = 0):
    config = {**BASE_CONFIG, **SMALL}
    return loop.init_model(config, seed), config


def test_layer_plan_keeps_dense_layers_once_and_spreads_the_moe_layers():
    assert layer_sources(4, 1, 16) == [(0, True)] + [
        (src, copy == 0) for src in (1, 2, 3) for copy in range(5)
    ]
    assert layer_sources(3, 1, 6) == [(0, True), (1, True), (1, False), (1, False), (2, True), (2, False)]
    with pytest.raises(ValueError, match="cannot grow 3 layers"):
        layer_sources(3, 1, 2)


def test_grown_model_computes_the_same_function_and_then_trains_its_new_layers():
    model, config = small_model()
    deep, overrides = grow(model, 7)
    assert overrides == {"num_hidden_layers": 7} and len(deep.layers) == 7
    x = mx.array(np.random.default_rng(0).integers(0, 64, (2, 24)))
    (a, ha), (b, hb) = model(x), deep(x)
    assert mx.abs(a - b).max().item() == 0.0
    assert (
        mx.abs(model.mtp_forward(ha[:, :-1], x[:, 1:]) - deep.mtp_forward(hb[:, :-1], x[:, 1:])).max().item()
        == 0.0
    )
    assert mx.abs(deep.layers[2].self_attn.o_proj.weight).max().item() == 0.0  # a new copy
    assert mx.abs(deep.layers[1].self_attn.o_proj.weight).max().item() > 0.0  # the trained one
    cfg = loop.TrainConfig(steps=2, batch=2, context=16, warmup=1, compile=False, log_every=100)
    stream = np.random.default_rng(1).integers(0, 64, 500).astype(np.int32)
    sampler = data.BatchSampler(stream, cfg.batch, cfg.context, 0)
    loop.train(deep, {**config, **overrides}, sampler.next, cfg, log=lambda m: None)
    assert mx.abs(deep.layers[2].self_attn.o_proj.weight).max().item() > 0.0


def _run(tmp_path, steps, stop_after=None, name="run"):
    """Train `steps` steps; with stop_after, stop there (as an interruption would, after
    the checkpoint) and resume from the saved state in a fresh model."""
    model, config = small_model(3)
    cfg = loop.TrainConfig(
        steps=steps, batch=2, context=16, warmup=1, checkpoint_every=2, compile=False, log_every=100
    )
    stream = np.random.default_rng(2).integers(0, 64, 800).astype(np.int32)
    states = tmp_path / name
    meta = {"preset": "test", "steps": steps}
    sampler = data.BatchSampler(stream, cfg.batch, cfg.context, 5)
    if stop_after is None:
        loop.train(
            model,
            config,
            sampler.next,
            cfg,
            log=lambda m: None,
            resumable=loop.Resumable(states, sampler.rng, meta),
        )
        return model
    cut = loop.Resumable(states, sampler.rng, meta)
    loop.train(model, config, sampler.next, _stopping(cfg, stop_after), log=lambda m: None, resumable=cut)
    assert resume.exists(states)
    model, opt_state, rng_state, history = resume.load(states, meta)
    assert len(history) == stop_after
    sampler = data.BatchSampler(stream, cfg.batch, cfg.context, 5)
    sampler.rng.bit_generator.state = rng_state
    loop.train(
        model,
        config,
        sampler.next,
        cfg,
        log=lambda m: None,
        resumable=loop.Resumable(states, sampler.rng, meta, (opt_state, history)),
    )
    with pytest.raises(CheckpointError, match="saved by another recipe"):
        resume.load(states, {"preset": "other"})
    return model


def _stopping(full, after):
    """The full run's config, marked to be interrupted after `after` steps."""

    class Stop(loop.TrainConfig):
        pass

    cfg = Stop(**full.__dict__)
    cfg._stop = after
    return cfg


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    whole = _run(tmp_path, 4, name="whole")
    real_train = loop.train

    def interrupted(model, config, next_batch, cfg, out=None, log=print, resumable=None):
        stop = getattr(cfg, "_stop", None)
        if stop is None:
            return real_train(model, config, next_batch, cfg, out, log, resumable)
        calls = {"n": 0}

        def batches():
            calls["n"] += 1
            if calls["n"] > stop:
                raise KeyboardInterrupt
            return next_batch()

        try:
            real_train(model, config, batches, cfg, out, log, resumable)
        except KeyboardInterrupt:
            pass

    monkeypatch.setattr(loop, "train", interrupted)
    resumed = _run(tmp_path, 4, stop_after=2, name="cut")
    a, b = dict(tree_flatten(whole.parameters())), dict(tree_flatten(resumed.parameters()))
    assert a.keys() == b.keys()
    assert max(mx.abs(a[k] - b[k]).max().item() for k in a) < 1e-6


def test_deep_refuses_a_leftover_state_without_resume(tmp_path, capsys):
    out = tmp_path / "deep"
    (out / ".resume" / "latest").mkdir(parents=True)
    (out / ".resume" / "latest" / "state.json").write_text("{}")
    rc = cli_main(["train", "--preset", "deep", "--out", str(out), "--no-openblas"])
    assert rc == 2
    assert "pass --resume to continue it" in capsys.readouterr().err
    rc = cli_main(["train", "--preset", "deep", "--out", str(out), "--no-openblas", "--resume"])
    assert rc == 2
    assert "state.json: saved by another recipe" in capsys.readouterr().err


# The shipped deep checkpoint: its shape, mlx-lm parity on a few tokens, accepted drafts.
def test_shipped_deep_checkpoint_is_deep_parity_with_mlx_lm_and_drafts_are_accepted():
    import json

    from runner.engine.checkpoint import SHIPPED, load_model, load_tokenizer, read_args
    from runner.train import evaluate

    deep, tiny = SHIPPED / "deep", SHIPPED / "tiny"
    cfg = json.loads((deep / "config.json").read_text())
    assert cfg["model_type"] == "glm4_moe" and cfg["num_nextn_predict_layers"] == 1
    assert cfg["num_hidden_layers"] >= 12
    assert sum(p.stat().st_size for p in deep.iterdir() if p.is_file()) <= 40_000_000
    for shared in ("tokenizer.json", "heldout.jsonl"):  # every workload applies to both
        assert (deep / shared).read_bytes() == (tiny / shared).read_bytes()
    model = load_model(deep, read_args(deep), with_mtp=True, with_indexer=True)
    tok = load_tokenizer(deep)
    prompts = [p.text for p in read_prompts(deep / "heldout.jsonl")[:4]]
    ids = np.array([tok.encode(t).ids[:96] for t in prompts], dtype=np.int32)
    generated = evaluate.greedy_mlx_lm(deep, ids, 12)
    res = evaluate.acceptance(model, ids, generated)
    assert res["parity_mismatches"] == 0  # mlx-lm's greedy tokens are ours
    assert res["mtp_acceptance"] >= 0.5, res["mtp_acceptance"]
    assert evaluate.logit_parity(deep, model, ids[0]) < 1e-3
