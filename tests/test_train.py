"""The tiny-model recipe: corpus manifest and split, the training forward and losses,
a few real training steps, checkpoint round-trip, evaluation, the CLI's bad-input path,
and the shipped checkpoint itself (loads in our engine and in mlx-lm, same greedy tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from runner.cli import main as cli_main
from runner.engine.checkpoint import SHIPPED, load_model, load_tokenizer, read_args
from runner.engine.model import Model
from runner.prompts import Prompt, PromptsError, read_prompts, write_prompts
from runner.train import corpus, data, evaluate, loop, losses
from runner.train.random_init import BASE_CONFIG, write_random_checkpoint

SMALL = dict(vocab_size=64, eos_token_id=0)


def small_model(seed: int = 0, **over) -> tuple[Model, dict]:
    config = {**BASE_CONFIG, **SMALL, **over}
    return loop.init_model(config, seed), config


def fake_stdlib(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    for d in ("test", "site-packages", "idlelib"):
        (root / d).mkdir()
        (root / d / "skip.py").write_text("x = 1\n")
    (root / "a.py").write_text("def f():\n    return 1\n")
    (root / "pkg" / "b.py").write_bytes(b"# caf\xe9 in latin-1\ny = 2\n")
    (root / "notes.txt").write_text("not python\n")
    return root


def test_manifest_lists_sources_and_refuses_changed_files(tmp_path):
    root = fake_stdlib(tmp_path / "lib")
    files = corpus.list_sources(root)
    assert [f.path for f in files] == ["a.py", "pkg/b.py"]
    manifest = tmp_path / "manifest.json"
    corpus.write_manifest(files, root, manifest)
    assert corpus.verify(root, manifest) == files
    assert corpus.read_text(root, files[1]) == "# caf in latin-1\ny = 2\n"
    (root / "a.py").write_text("changed\n")
    (root / "c.py").write_text("new\n")
    with pytest.raises(
        corpus.CorpusError, match=r"manifest\.json.*a\.py: sha256 differs.*c\.py: not in the manifest"
    ):
        corpus.verify(root, manifest)


def test_missing_or_broken_manifest_names_the_file(tmp_path):
    with pytest.raises(corpus.CorpusError, match="nope.json: missing"):
        corpus.read_manifest(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"files": [{"path": "a.py"}]}')
    with pytest.raises(corpus.CorpusError, match="bad.json: not a corpus manifest"):
        corpus.read_manifest(bad)


def test_split_is_deterministic_and_about_five_percent():
    paths = [f"mod{i}/file{i}.py" for i in range(4000)]
    held = [p for p in paths if corpus.is_heldout(p)]
    assert held == [p for p in paths if corpus.is_heldout(p)]
    assert 0.03 < len(held) / len(paths) < 0.07


def test_committed_manifest_records_the_split_it_uses():
    body = json.loads(corpus.MANIFEST.read_text())
    assert len(body["files"]) > 100
    assert [f["path"] for f in body["files"]] == sorted(f["path"] for f in body["files"])
    for f in body["files"]:
        assert f["split"] == ("heldout" if corpus.is_heldout(f["path"]) else "train")
        assert not set(f["path"].split("/")[:-1]) & corpus.EXCLUDED_DIRS


def test_heldout_prompts_are_line_aligned_chunks():
    text = "".join(f"line number {i} of the file\n" for i in range(400))
    prompts = data.heldout_prompts([("m.py", text)], min_chars=300, max_chars=500, limit=5)
    assert len(prompts) == 5 and prompts == data.heldout_prompts([("m.py", text)], 300, 500, 5)
    for p in prompts:
        assert p.id.startswith("m.py:") and p.text.startswith("line number") and p.text.endswith("\n")
        assert 300 <= len(p.text) <= 500


def test_prompts_round_trip_and_a_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "heldout.jsonl"
    prompts = [Prompt("m.py:1", "x = 1\n"), Prompt("m.py:9", "y = 2\n")]
    write_prompts(prompts, path)
    assert read_prompts(path) == prompts
    path.write_text('{"text": "no id"}\n\n{"id": "a", "text": "b"}\n')
    assert read_prompts(path) == [Prompt("heldout.jsonl:1", "no id"), Prompt("a", "b")]
    path.write_text('{"id": "a", "text": "b"}\n{"id": "c"}\n')
    with pytest.raises(PromptsError, match=r"heldout\.jsonl:2: expected an object with a string 'text'"):
        read_prompts(path)
    path.write_text("not json\n")
    with pytest.raises(PromptsError, match=r"heldout\.jsonl:1: not a JSON object"):
        read_prompts(path)
    with pytest.raises(PromptsError, match="absent.jsonl: cannot read prompts"):
        read_prompts(tmp_path / "absent.jsonl")


def test_batches_are_seeded_windows():
    stream = np.arange(1000, dtype=np.int32)
    a, b = data.BatchSampler(stream, 4, 16, seed=3), data.BatchSampler(stream, 4, 16, seed=3)
    x, y = a.next(), b.next()
    assert x.shape == (4, 18) and (x == y).all()
    assert (np.diff(x, axis=1) == 1).all()  # contiguous windows of the stream


@pytest.mark.parametrize(
    "over",
    [
        dict(),
        dict(n_group=4, topk_group=2, use_qk_norm=True),
        dict(n_shared_experts=None, routed_scaling_factor=2.5, norm_topk_prob=False),
    ],
)
def test_training_forward_equals_the_engine_forward(over):
    model, _ = small_model(1, **over)
    for layer in loop.moe_layers(model):  # spread the biases so routing is non-trivial
        layer.mlp.gate.e_score_correction_bias = mx.random.normal((8,)) * 0.3
    tokens = mx.random.randint(0, 64, (2, 12))
    logits, hidden, cap = losses.forward(model, tokens)
    ref_logits, ref_hidden = model(tokens)
    assert mx.allclose(logits, ref_logits, atol=1e-4) and mx.allclose(hidden, ref_hidden, atol=1e-5)
    nxt = mx.random.randint(0, 64, (2, 12))
    assert mx.allclose(losses.mtp_logits(model, hidden, nxt, cap), model.mtp_forward(hidden, nxt), atol=1e-4)
    k = model.args.num_experts_per_tok
    assert [int(c.sum().item()) for c in cap.expert_counts] == [2 * 12 * k] * len(loop.moe_layers(model))


def test_dense_attention_is_a_causal_distribution():
    model, _ = small_model(2)
    n = model.layers[0].input_layernorm(model.embed_tokens(mx.random.randint(0, 64, (1, 9))))
    p = losses.dense_attention(model.layers[0], n)
    assert mx.allclose(p.sum(axis=-1), mx.ones((1, 9)), atol=1e-5)
    assert float(mx.triu(p[0], k=1).abs().max().item()) == 0.0
    assert float(losses.indexer_kl(model.layers[0], n).item()) >= 0.0


def test_indexer_loss_moves_only_the_indexer():
    model, _ = small_model(3)
    tokens = mx.random.randint(0, 64, (2, 10))

    def kl_only(m):
        _, _, cap = losses.forward(m, tokens)
        return mx.stack([losses.indexer_kl(l, n) for l, n in zip(m.layers, cap.normed)]).mean()

    grads = dict(tree_flatten(nn.value_and_grad(model, kl_only)(model)[1]))
    moved = {k for k, g in grads.items() if float(mx.abs(g).max().item()) > 0}
    assert moved and all(".indexer." in k for k in moved)


def test_a_few_steps_reduce_the_loss_and_the_checkpoint_round_trips(tmp_path):
    model, config = small_model(4)
    rng = np.random.default_rng(0)
    # A learnable stream: a fixed random cycle of 40 tokens, repeated.
    stream = np.tile(rng.integers(1, 64, 40), 60).astype(np.int32)
    sampler = data.BatchSampler(stream, 4, 32, seed=0)
    cfg = loop.TrainConfig(
        steps=30,
        batch=4,
        context=32,
        peak_lr=1e-2,
        warmup=3,
        checkpoint_every=10,
        log_every=100,
        compile=True,
    )
    history = loop.train(model, config, sampler.next, cfg, out=tmp_path / "ckpt", log=lambda m: None)
    first, last = history[0], history[-1]
    assert last["loss"] < first["loss"] - 1.0 and last["mtp_loss"] < first["mtp_loss"] - 1.0
    out = tmp_path / "ckpt"
    assert json.loads((out / "train_log.json").read_text())["steps_done"] == 30
    args = read_args(out)
    loaded = load_model(out, args, with_mtp=True, with_indexer=True)
    x = mx.array(stream[None, :20])
    a, ha = model(x)
    b, hb = loaded(x)
    assert mx.array_equal(a, b) and mx.array_equal(model.mtp_forward(ha, x), loaded.mtp_forward(hb, x))
    assert mx.array_equal(model.layers[1].indexer.scores(ha), loaded.layers[1].indexer.scores(hb))
    biases = [l.mlp.gate.e_score_correction_bias for l in loop.moe_layers(loaded)]
    assert any(float(mx.abs(b).max().item()) > 0 for b in biases)  # balancing moved them


def test_unigram_baseline_is_the_train_distributions_cross_entropy():
    train = np.array([0, 0, 1, 1], dtype=np.int32)  # add-one counts: 3, 3, 1 over vocab 3
    assert evaluate.unigram_loss(train, np.array([2]), 3) == pytest.approx(-np.log(1 / 7))
    assert evaluate.unigram_loss(train, np.array([0, 1]), 3) == pytest.approx(-np.log(3 / 7))


def test_acceptance_and_parity_on_a_random_checkpoint(tmp_path):
    d = write_random_checkpoint(tmp_path / "r", seed=5)
    args = read_args(d)
    model = load_model(d, args, with_mtp=True, with_indexer=False)
    prompts = np.random.default_rng(0).integers(1, args.vocab_size, (3, 16)).astype(np.int32)
    generated = evaluate.greedy_mlx_lm(d, prompts, 8)
    res = evaluate.acceptance(model, prompts, generated)
    assert res["drafted"] == 3 * 8 and res["parity_mismatches"] == 0 and 0.0 <= res["mtp_acceptance"] <= 1.0


def test_cli_rejects_a_bad_manifest_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "manifest.json"
    bad.write_text("{not json")
    code = cli_main(["train-tiny", "--no-openblas", "--manifest", str(bad), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "manifest.json: not a corpus manifest" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


# The shipped checkpoint: only the checks that need it.
TINY = SHIPPED / "tiny"


def test_shipped_checkpoint_fits_the_issue():
    cfg = json.loads((TINY / "config.json").read_text())
    assert cfg["model_type"] == "glm4_moe" and cfg["num_nextn_predict_layers"] == 1
    assert cfg["n_routed_experts"] >= 8 and cfg["num_experts_per_tok"] == 2 and cfg["n_shared_experts"] == 1
    assert cfg["first_k_dense_replace"] == 1
    assert sum(p.stat().st_size for p in TINY.iterdir() if p.is_file()) <= 25_000_000
    tok = load_tokenizer(TINY)
    assert cfg["eos_token_id"] == tok.token_to_id(data.EOS_TOKEN)
    prompts = read_prompts(TINY / "heldout.jsonl")
    assert len(prompts) >= 200 and len({p.id for p in prompts}) == len(prompts)
    held = {f.path for f in corpus.split(corpus.read_manifest())[1]}
    assert {p.id.rsplit(":", 1)[0] for p in prompts} <= held


def test_shipped_checkpoint_greedy_tokens_match_mlx_lm():
    import mlx_lm

    args = read_args(TINY)
    ours = load_model(TINY, args, with_mtp=True, with_indexer=True)
    ref, tokenizer = mlx_lm.load(str(TINY))
    prompt = read_prompts(TINY / "heldout.jsonl")[0].text
    ids = np.array(tokenizer.encode(prompt)[:64], dtype=np.int32)
    generated = evaluate.greedy_mlx_lm(TINY, ids[None], 16)
    res = evaluate.acceptance(ours, ids[None], generated)
    assert res["parity_mismatches"] == 0
    assert float(mx.abs(ref(mx.array(ids[None])) - ours(mx.array(ids[None]))[0]).max().item()) < 1e-3


def test_indexer_attention_mass_is_a_share():
    model, _ = small_model(6)
    stream = np.random.default_rng(1).integers(0, 64, 3 * evaluate.CONTEXT + 1).astype(np.int32)
    top, recent = evaluate.indexer_attention_mass(model, stream, 8, n_windows=2)
    assert 0.0 < top <= 1.0 + 1e-5 and 0.0 < recent <= 1.0 + 1e-5
    # With k = T - 1 only the last query counts, and it misses exactly one of its T keys.
    nearly, nearly_recent = evaluate.indexer_attention_mass(model, stream, evaluate.CONTEXT - 1, n_windows=1)
    assert 0.95 < nearly < 1.0 and 0.95 < nearly_recent < 1.0


def test_mtp_self_distillation_moves_only_the_mtp_and_lowers_its_kl():
    from runner.train.distill import distill_loss, distill_mtp

    model, _ = small_model(7)
    stream = np.tile(np.random.default_rng(2).integers(1, 64, 30), 40).astype(np.int32)
    sampler = data.BatchSampler(stream, 4, 23, seed=1)  # windows of 25 = T + 1 for T = 24
    before = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    probe = mx.array(sampler.next())
    kl0 = distill_loss(model, probe).item()
    distill_mtp(model, sampler.next, steps=25, lr=1e-2, log=lambda m: None)
    assert distill_loss(model, probe).item() < kl0
    after = dict(tree_flatten(model.parameters()))
    changed = {k for k, v in before.items() if not np.array_equal(v, np.array(after[k]))}
    assert changed and all(k.startswith("mtp.") and "e_score_correction_bias" not in k for k in changed)
    assert "e_score_correction_bias" not in str(tree_flatten(model.trainable_parameters()))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--distill-only", "--distill-steps", "0"], "--distill-only needs --distill-steps"),
        (["--evaluate-only", "--out", "{tmp}/absent"], "absent: checkpoint directory not found"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli_main(["train-tiny", "--no-openblas", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
