"""The model card's "Block drafter" section, from the files in `<checkpoint>/block_drafter/`
(block_drafter.json, train_log.json, eval.json). Nothing when the checkpoint has no
drafter. It formats; it measures nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from .drafter_data import ContinuationSpec


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def drafter_lines(checkpoint: Path) -> list[str]:
    d = checkpoint / "block_drafter"
    cfg, log, ev = _load(d / "block_drafter.json"), _load(d / "train_log.json"), _load(d / "eval.json")
    if not cfg:
        return []
    tc, data = log.get("train_config", {}), log.get("data", {})
    n = data.get("sequences")
    sequences_flag = "" if n in (None, ContinuationSpec().sequences) else f" --sequences {n}"
    n_layers = _load(checkpoint / "config.json").get("num_hidden_layers")
    hist = log.get("history", [])
    last = hist[-50:]
    train_loss = sum(h["loss"] for h in last) / max(len(last), 1)
    size_mb = sum(p.stat().st_size for p in d.glob("block_drafter.*")) / 1e6
    lines = [
        "## Block drafter",
        "",
        f"- `block_drafter/block_drafter.safetensors` + `block_drafter.json`: a DFlash-style block-diffusion "
        f"drafter, {cfg['num_layers']} bidirectional decoder layers ({cfg['num_heads']} query / "
        f"{cfg['num_kv_heads']} key-value heads of {cfg['head_dim']}, SwiGLU {cfg['intermediate_size']}), "
        f"{log.get('parameters', 0) / 1e6:.2f}M parameters, {size_mb:.1f} MB (float32). It shares the "
        "target's embedding, final norm and head (not copied); mlx-lm and the target's loader "
        "ignore its folder.",
        f"- Context: the target's states at layers {list(cfg['target_layers'])} (a layer's normed input; "
        f"{n_layers} is the final hidden), concatenated, one linear, RMSNorm: "
        "keys and values only. Block input: the last committed token, then k mask embeddings; "
        "block position i predicts token i.",
        f"- Training (`{log.get('command', '')}`): {log.get('steps_done')} steps of "
        f"{tc.get('batch')} sequences x {tc.get('anchors')} random anchors, blocks of k = {tc.get('k')}, "
        f"{_loss(tc)} weighted by exp(-(i-1)/{tc.get('gamma')}), AdamW peak lr {tc.get('peak_lr')}, "
        f"on {data.get('sequences')} greedy continuations by the target ({data.get('prompt_tokens')} "
        f"{_prompt_source(data)} prompt tokens + {data.get('generate')} generated, seed "
        f"{data.get('seed')}){_start(log)}; "
        f"{log.get('train_s', 0) / 60:.0f} min of training steps, wall time on the machine that trained "
        "it (its load is not recorded, so the time says little about the work). Resume: "
        f"`{_resume_command(log, checkpoint.name, tc, sequences_flag)}` "
        f"(it needs the state folder `.resume/{_state_folder(log)}/`, which is not committed).",
    ]
    if cfg.get("context_window"):
        lines.append(
            f"- Context window: a block reads the last {cfg['context_window']} positions of its row "
            "(the longest context it was trained on), however long the row grows."
        )
    if not ev:
        return [*lines, "- Not evaluated yet.", ""]
    acc = ev["acceptance_at"]
    return [
        *lines,
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| drafter train loss, last 50 steps (weighted, nats/token) | {train_loss:.3f} |",
        f"| held-out block loss (weighted, {ev['teacher_forced_blocks']:,} blocks) | "
        f"{ev['heldout_block_loss']:.3f} |",
        f"| mean accepted length tau at k = {ev['k']} (committed per drafting round) | {ev['tau']:.2f} |",
        "| acceptance by position (share of rounds accepting drafts 1..i) | "
        + " / ".join(f"{100 * a:.0f}%" for a in acc)
        + " |",
        f"| first-position acceptance, every held-out anchor | "
        f"{100 * ev['first_position_acceptance']:.1f}% |",
        f"| the MTP layer's on the same positions | {100 * ev['mtp_first_position_acceptance']:.1f}% |",
        *_unseen_rows(ev.get("unseen")),
        "",
        f"Simulated greedy block drafting without the engine: {ev['prompts']} held-out prompts cut to "
        f"{ev['prompt_tokens']} tokens and continued greedily for {ev['generated_tokens']}; from each "
        f"round's anchor the drafter proposes k = {ev['k']} tokens, the longest prefix equal to the "
        f"target's greedy tokens is accepted plus the target's bonus token ({ev['rounds']} rounds). "
        "tau = 1 + the sum of acceptance by position.",
        *_unseen_note(ev.get("unseen")),
        "",
    ]


def _resume_command(log: dict, model: str, tc: dict, sequences_flag: str) -> str:
    if log.get("init"):  # the general recipe: its settings are the recipe's own
        return f"runner train --drafter block --model {model} --recipe general --resume"
    return f"runner train --drafter block --model {model} --steps {tc.get('steps')}{sequences_flag} --resume"


def _state_folder(log: dict) -> str:
    return "block_drafter-general" if log.get("init") else "block_drafter"


def _loss(tc: dict) -> str:
    share = tc.get("distill") or 0
    if not share:
        return "cross-entropy against its greedy tokens"
    return (
        f"{100 * share:.0f}% KL divergence from the target's own distribution and "
        f"{100 * (1 - share):.0f}% cross-entropy against its greedy tokens"
    )


def _prompt_source(data: dict) -> str:
    if data.get("corpus") == "broad":
        return "standard-library (train split, tests, idlelib, lib2to3)"
    return "train-stream"


def _start(log: dict) -> str:
    init = log.get("init")
    return f", continued from {init['from']} (sha256 {init['sha256'][:12]})" if init else ""


def _unseen_rows(u: dict | None) -> list[str]:
    if not u:
        return []
    return [
        f"| unseen text: tau at k = {u['k']} | {u['tau']:.2f} |",
        "| unseen text: acceptance by position | "
        + " / ".join(f"{100 * a:.0f}%" for a in u["acceptance_at"])
        + " |",
        f"| unseen text: first-position acceptance (the MTP layer's) | "
        f"{100 * u['first_position_acceptance']:.1f}% ({100 * u['mtp_first_position_acceptance']:.1f}%) |",
    ]


def _unseen_note(u: dict | None) -> list[str]:
    if not u:
        return []
    return [
        "",
        f"Unseen text: the same simulation on {u['prompts']} prompts of third-party Python code that "
        f"neither the target nor its drafter was trained on (`runner/unseen_text.py`: {u['prompt_set']}; "
        f"{u['rounds']} rounds). The set was fixed before this drafter was trained and is never trained on.",
    ]
