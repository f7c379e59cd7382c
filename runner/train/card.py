"""The model card (`README.md`) of a trained checkpoint, written from the files the
recipe leaves beside it: recipe.json, train_log.json, eval.json, config.json and the
corpus manifest. It formats; it measures nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from . import corpus
from .drafter_card import drafter_lines


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 1e6


def parameter_counts(directory: Path, mtp_layer: int) -> dict:
    import mlx.core as mx

    counts = {"main": 0, "mtp": 0, "indexer": 0}
    for f in sorted(directory.glob("*.safetensors")):
        for name, arr in mx.load(str(f)).items():
            part = (
                "indexer"
                if f.name == "indexer.safetensors"
                else ("mtp" if name.startswith(f"model.layers.{mtp_layer}.") else "main")
            )
            counts[part] += arr.size
    return counts


def render(directory: Path, manifest: Path = corpus.MANIFEST) -> str:
    recipe, log = _load(directory / "recipe.json"), _load(directory / "train_log.json")
    ev, cfg = _load(directory / "eval.json"), _load(directory / "config.json")
    tc = log.get("train_config", {})
    hist = log.get("history", [])
    last = hist[-50:]
    final_train = sum(h["loss"] for h in last) / max(len(last), 1)
    final_mtp = sum(h["mtp_loss"] for h in last) / max(len(last), 1)
    final_kl = sum(h["indexer_kl"] for h in last) / max(len(last), 1)
    files = corpus.read_manifest(manifest)
    _, heldout = corpus.split(files)
    man_sha = hashlib.sha256(manifest.read_bytes()).hexdigest()
    pc = parameter_counts(directory, cfg.get("num_hidden_layers", -1))
    n_params = (
        f"{sum(pc.values()) / 1e6:.2f}M ({pc['main'] / 1e6:.2f}M main, "
        f"{pc['mtp'] / 1e6:.2f}M MTP layer, {pc['indexer'] / 1e6:.3f}M indexer)"
    )
    hp = ", ".join(f"{k} {v}" for k, v in tc.items())
    model_keys = [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "first_k_dense_replace",
        "intermediate_size",
        "n_routed_experts",
        "num_experts_per_tok",
        "n_shared_experts",
        "moe_intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "partial_rotary_factor",
        "use_qk_norm",
        "num_nextn_predict_layers",
        "index_n_heads",
        "index_head_dim",
        "eos_token_id",
    ]
    lines = [
        *_header(recipe, cfg),
        "",
        "## Files",
        "",
        "- `config.json` (`model_type: glm4_moe`), `model.safetensors` (main model; the MTP layer at",
        f"  `model.layers.{cfg.get('num_hidden_layers')}.*`), `indexer.safetensors` (lightning indexer,",
        "  ours), `tokenizer.json` + `tokenizer_config.json` (byte-level BPE),",
        "  `heldout.jsonl` (the workload's prompts), `recipe.json`, `train_log.json`, `eval.json`.",
        f"- {n_params} parameters; all files together {_mb(directory):.1f} MB (float32).",
        "",
        "## Model",
        "",
        "| key | value |",
        "| --- | --- |",
        *[f"| {k} | {cfg.get(k)} |" for k in model_keys],
        "",
        "## Corpus",
        "",
        f"The running interpreter's standard-library `.py` sources (Python {recipe.get('python')}, "
        f"`{recipe.get('stdlib_root')}`), excluding `site-packages`, `test`, `tests`, `idlelib` and "
        "`lib2to3` directories, read as UTF-8 with undecodable bytes dropped. The manifest "
        f"`runner/train/corpus_manifest.json` (sha256 `{man_sha[:16]}...`) pins {len(files)} files, "
        f"{sum(f.size for f in files):,} bytes, each with size and sha256; the recipe refuses to run "
        "when the local files differ (unless `--rebuild-manifest`).",
        f"Split by file on sha256(path) mod 100 < {corpus.HELDOUT_PERCENT}: "
        f"{recipe.get('train_files')} train files "
        f"({recipe.get('train_bytes', 0):,} bytes, {recipe.get('train_tokens', 0):,} tokens) and "
        f"{recipe.get('heldout_files')} held-out files ({recipe.get('heldout_bytes', 0):,} bytes). "
        f"`heldout.jsonl` holds {recipe.get('heldout_prompts', 300)} line-aligned chunks "
        "(1,000-1,600 characters) of "
        "held-out files only. Held-out files:",
        "",
        "| file | bytes | sha256 |",
        "| --- | --- | --- |",
        *[f"| `{f.path}` | {f.size:,} | `{f.sha256[:16]}` |" for f in heldout],
        "",
        "## Training",
        "",
        f"- Command: `{recipe.get('command', '').strip()}`",
        *_recreate_lines(recipe),
        f"- Machine: {recipe.get('machine')}; MLX {recipe.get('mlx')}; BLAS: {recipe.get('blas')}.",
        "- BLAS: MLX's Linux CPU wheel uses the reference BLAS, about ten times slower to train on. "
        "With Debian's OpenBLAS installed (`apt-get install libopenblas0-pthread`) the training "
        "commands re-run themselves under `LD_PRELOAD=.../libopenblas.so.0` (a forward's logits "
        "agree with the reference BLAS to float32 rounding); OPENBLAS_CORETYPE is passed through "
        "as set. `--no-openblas` keeps the reference BLAS.",
        f"- Wall time: {recipe.get('train_wall_s', 0) / 60:.1f} min for {log.get('steps_done')} steps "
        "(tokenizer, corpus and training; others shared the machine).",
        f"- Hyper-parameters: {hp}.",
        "- AdamW (betas 0.9, 0.95), linear warm-up then cosine decay; loss = next-token + "
        f"{tc.get('mtp_weight')} x MTP (token t+2, trained jointly, DeepSeek-V3 style) + indexer KL. "
        "The indexer learns KL(dense attention averaged over heads || softmax(index scores)) "
        "with stop-gradient on its input and target, so it never moves the main weights. "
        "Expert load is balanced without an auxiliary loss: each step every router's "
        "`e_score_correction_bias` moves by balance_rate x sign(mean load - load).",
        *_distill_lines(recipe.get("distill")),
        "- Training runs every routed expert on every token and zero-weights the unchosen ones "
        "(the same values as the engine's gather_mm MoE, several times faster on this CPU).",
        "",
        "## Results",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| train loss, last 50 steps (nats/token) | {final_train:.3f} |",
        f"| train loss, {ev.get('heldout_tokens', 0) // 256} train windows of 256 | "
        f"{ev.get('train_loss', float('nan')):.3f} |",
        f"| held-out next-token loss ({ev.get('heldout_tokens', 0):,} tokens) | "
        f"{ev.get('heldout_loss', float('nan')):.3f} |",
        f"| unigram baseline on held-out (train unigram, add-one) | "
        f"{ev.get('unigram_heldout_loss', float('nan')):.3f} |",
        f"| MTP train loss (t+2), last 50 steps | {final_mtp:.3f} |",
        f"| indexer KL, last 50 steps | {final_kl:.3f} |",
        f"| dense attention mass on the indexer's top-32 / top-64 keys (held-out, T=256) | "
        f"{100 * ev.get('indexer_top32_attention_mass', float('nan')):.1f}% / "
        f"{100 * ev.get('indexer_top64_attention_mass', float('nan')):.1f}% |",
        f"| the same on the 32 / 64 most recent keys (sliding-window baseline) | "
        f"{100 * ev.get('recent32_attention_mass', float('nan')):.1f}% / "
        f"{100 * ev.get('recent64_attention_mass', float('nan')):.1f}% |",
        f"| greedy MTP acceptance on held-out prompts | "
        f"{100 * ev.get('mtp_acceptance', float('nan')):.1f}% |",
        f"| the same on the {ev.get('prompts_excluding_encodings')} prompts "
        "not from `encodings/` charmap tables | "
        f"{100 * ev.get('mtp_acceptance_excluding_encodings', float('nan')):.1f}% |",
        f"| mlx-lm greedy tokens differing from ours | "
        f"{ev.get('parity_mismatches')} of {ev.get('parity_tokens')} |",
        f"| max abs logit difference vs mlx-lm (one prompt) | "
        f"{ev.get('max_logit_diff_vs_mlx_lm', float('nan')):.1e} |",
        "",
        f"Acceptance: {ev.get('prompts_used')} held-out prompts, each cut to its first "
        f"{ev.get('prompt_tokens')} tokens and continued greedily for "
        f"{ev.get('generated_tokens')} tokens; "
        "at each position the MTP draft argmax(mtp(h_t, x_{t+1})) is compared with the main "
        f"model's greedy x_(t+2) ({ev.get('drafted')} drafts). The continuations come from mlx-lm "
        "loading this directory; our engine's `Model` re-scores them and must agree on every token.",
        "",
        *drafter_lines(directory),
    ]
    return "\n".join(lines)


def _header(recipe: dict, cfg: dict) -> list[str]:
    if recipe.get("preset") == "deep":
        return [
            f"# deep: a {cfg.get('num_hidden_layers')}-layer GLM-4.5-style MoE grown from tiny, "
            "with an MTP layer and an indexer",
            "",
            "The deep checkpoint: one MTP layer on top of "
            f"{cfg.get('num_hidden_layers')} main layers, so the MTP layer and the second read of",
            "the head are a small share of a drafting pass, as on the large models the posts are",
            "about. Same tokenizer and held-out prompts as `tiny` (copied), so every workload",
            "applies to both. Made by `runner train --preset deep` (recipe in `runner/train/`).",
        ]
    return [
        "# tiny: a small trained GLM-4.5-style MoE with an MTP layer and an indexer",
        "",
        "The checkpoint every report runs on. Made by `runner train-tiny` (recipe in",
        "`runner/train/`); a re-run with the same interpreter, seed and manifest re-creates it.",
    ]


def _recreate_lines(recipe: dict) -> list[str]:
    if recipe.get("preset") == "deep":
        return [
            "- Re-create in one run: `runner train --preset deep` (grow, train, MTP "
            "self-distillation, this evaluation); after an interruption `runner train --preset "
            "deep --resume` continues from the last full-state checkpoint (every 20 steps).",
            f"- Grown from `{recipe.get('grown_from')}`: tiny's dense layer 0 is kept once and "
            "each of its three MoE layers is repeated five times in place. The first copy of "
            "a layer is the trained layer; the others are copies whose output projections "
            "(attention's o_proj, the experts' and shared experts' down_proj) are zero, so "
            "each adds nothing until training moves it: the grown model computes exactly "
            "tiny's function at step 0 (tested), with tiny's MTP layer, head and embeddings, "
            "and training starts from tiny's loss. Then all of it trains jointly as tiny was "
            f"trained (batches from sampler seed {recipe.get('sampler_seed')}).",
        ]
    return [
        "- Re-create in one run: `runner train-tiny` (training, then MTP self-distillation from the "
        "saved checkpoint, then this evaluation). The shipped files came from the two commands "
        "listed here, which do the same steps with the same seeds."
    ]


def _distill_lines(d: dict | None) -> list[str]:
    if not d:
        return ["- No MTP self-distillation phase (joint training alone)."]
    return [
        f"- Then MTP self-distillation (`{d['command']}`): only the MTP layer trains, for "
        f"{d['steps']} steps of batch {d['batch']} (seed {d['seed']}), on "
        "KL(main model's softmax at t+1 || MTP's softmax from (h_t, x_(t+1))); "
        f"KL {d['first_kl']:.3f} -> {d['last_kl']:.3f}, {d['wall_s'] / 60:.1f} min."
        + (
            ""
            if d.get("mtp_acceptance_before") is None
            else f" Greedy MTP acceptance before it: {100 * d['mtp_acceptance_before']:.1f}%."
        )
    ]


def write_card(directory: Path) -> None:
    (directory / "README.md").write_text(render(directory))
