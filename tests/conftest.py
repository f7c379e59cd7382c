"""Shared fixtures, found by pytest in every test file:

- tiny random checkpoints in the HF GLM-4.5 MoE layout, written once per session;
- a cache of engines keyed by knobs, so property tests reuse them;
- `fixture_db`: the generator's session-wide fixture database (`fixture_db.py`);
- `server`: an mlx_lm.server started as a user would, one a test module (`mlx_server.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixture_db import build_fixture
from hypothesis import HealthCheck, settings
from mlx_server import user_server

from runner.blas import OPT_OUT
from runner.engine import Engine
from runner.experiments.load import RULE_ENV
from runner.train.random_init import write_random_checkpoint

# Tests measure nothing: keep every process (and child `runner run`) on the same BLAS,
# so a chip's fingerprint does not change between a test's processes.
os.environ[OPT_OUT] = "1"
# The suite's workers share the cores by design, so the contention rule (a cell measured
# again when other processes took its CPU) is off for its runs; test_contention_rule.py
# turns it on and checks it against a real busy loop.
os.environ[RULE_ENV] = "off"

settings.register_profile(
    "default",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("default")

# Configurations that cover the parity-relevant branches of the architecture.
CONFIGS = {
    "base": dict(),
    "grouped": dict(n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2),
    "qknorm": dict(
        use_qk_norm=True, partial_rotary_factor=0.25, first_k_dense_replace=2, num_hidden_layers=3
    ),
    "no-shared-bias": dict(
        n_shared_experts=None,
        partial_rotary_factor=1.0,
        routed_scaling_factor=2.5,
        norm_topk_prob=False,
        attention_bias=True,
    ),
}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {
        name: write_random_checkpoint(root / name, seed=i, **over)
        for i, (name, over) in enumerate(CONFIGS.items())
    }


@pytest.fixture(scope="session")
def tiny_checkpoint(checkpoints):
    return checkpoints["base"]


@pytest.fixture(scope="session")
def engine_cache(tiny_checkpoint):
    cache: dict[tuple, Engine] = {}

    def get(**knobs) -> Engine:
        knobs.setdefault("compile", False)
        key = tuple(sorted(knobs.items()))
        if key not in cache:
            cache[key] = Engine.from_pretrained(tiny_checkpoint, **knobs)
        eng = cache[key]
        eng.sink = None
        return eng

    return get


@pytest.fixture(scope="session")
def fixture_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("db") / "runs.duckdb"
    build_fixture(path)
    return path


@pytest.fixture(scope="module")
def server():
    """An mlx_lm.server started outside the runner: (base_url, pid)."""
    with user_server() as started:
        yield started
