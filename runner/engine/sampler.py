"""Logits -> tokens. Pure functions over NumPy rows; each request has its own seeded
Generator, so a row's samples do not depend on which rows share its pass."""

from __future__ import annotations

import numpy as np


def probs(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """Softmax at `temperature`, restricted to the smallest top-p nucleus, renormalised."""
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        keep = order[: int(np.searchsorted(cum, top_p)) + 1]
        nucleus = np.zeros_like(p)
        nucleus[keep] = p[keep]
        p = nucleus / nucleus.sum()
    return p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    return int(rng.choice(p.shape[0], p=p))


def accept_draft(p: np.ndarray, q: np.ndarray, draft: int, rng: np.random.Generator) -> tuple[bool, int]:
    """Speculative sampling: keep `draft` with probability min(1, p/q); otherwise resample
    from norm(max(0, p - q)). The committed token is then distributed exactly as p."""
    if rng.random() < min(1.0, p[draft] / q[draft]):
        return True, draft
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    return False, sample(residual / total if total > 0 else p, rng)
