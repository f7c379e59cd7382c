"""Fair lengths and runtime versions against a real mlx_lm.server (loopback, a free port).

The shipped tiny checkpoint never emits its end-of-sequence token in a few dozen tokens,
so a test on it could not tell a server that stops at EOS from one that does not. The
checkpoint here is tiny with "." (id 14, among its most frequent greedy tokens) declared
as a second end-of-sequence id in config.json: an mlx-lm that stops at EOS stops early,
and one told not to (the runner's mlx-lm-server arm bans EOS by logit_bias) gives every
request exactly max_new_tokens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from mlx_server import free_port, wait_healthy

from runner.experiments.declaration import load
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress
from runner.runtimes.fair import eos_token_ids
from runner.runtimes.openai import OpenAI

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "runner" / "models" / "tiny"
DOT = 14  # "." in tiny's tokenizer


@pytest.fixture(scope="module")
def dotted(tmp_path_factory) -> Path:
    """tiny, with "." as an end-of-sequence id too (the weights are links to tiny's)."""
    out = tmp_path_factory.mktemp("dotted") / "tiny-dot"
    out.mkdir()
    for f in TINY.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f)
    config = json.loads((TINY / "config.json").read_text())
    config["eos_token_id"] = [0, DOT]
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def external(dotted):
    """An mlx_lm.server on the dotted checkpoint started outside the runner: its base_url."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm", "server", "--model", str(dotted), "--host", "127.0.0.1"]
        + ["--port", str(port), "--log-level", "WARNING"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_eos_ids_come_from_the_config_and_the_tokenizer(dotted):
    assert eos_token_ids(TINY) == (0,)
    assert eos_token_ids(dotted) == (0, DOT)


def test_a_server_arm_gives_exactly_the_asked_tokens_and_a_short_arm_is_stored_short(
    dotted, external, tmp_path
):
    decl = tmp_path / "fair.toml"
    decl.write_text(
        textwrap.dedent(f"""\
        title = "fair lengths"
        model = "{dotted}"
        seed = 3
        rounds = 1
        concurrency = [1, 2]

        [workload]
        prompts = "heldout"
        requests_per_client = 3
        prompt_tokens = [8, 16]
        max_new_tokens = 24
        min_cell_seconds = 0

        [engine]
        max_batch_size = 2

        [arms.served]
        runtime = "mlx-lm-server"

        [arms.mlx]
        runtime = "mlx-lm"

        [arms.remote]
        runtime = "openai"
        base_url = "{external}"
        max_batch_size = 2
        """)
    )
    db = tmp_path / "runs.duckdb"
    summary = run_experiment(load(decl), db, Progress(mode="plain"))
    assert summary.completed == 6 and not summary.faults
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.arm, count(*), count(*) FILTER (WHERE q.output_tokens < q.asked_tokens), "
            "min(q.asked_tokens), max(q.asked_tokens), max(q.output_tokens) "
            "FROM requests q JOIN runs r USING (run_id) GROUP BY 1 ORDER BY 1"
        ).fetchall()
        versions = con.execute(
            "SELECT DISTINCT arm, runtime_version, server_version FROM runs ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    (mlx, n_mlx, short_mlx, *_), remote, (served, n_served, short_served, lo, hi, longest) = rows
    assert (mlx, remote[0], served) == ("mlx", "remote", "served") and n_mlx == n_served == 9
    assert short_served == 0 and lo == hi == longest == 24  # every server request: exactly 24
    assert remote[1:] == (9, 0, 24, 24, 24)  # an openai arm on mlx_lm.server too (logit_bias)
    assert short_mlx > 0  # in-process mlx-lm stops at ".": those requests are stored short
    from importlib.metadata import version

    package = f"mlx-lm {version('mlx-lm')}"
    assert versions[0] == ("mlx", package, None)
    assert versions[1][:2] == ("remote", None) and versions[1][2].startswith(version("mlx-lm") + "-")
    assert versions[2][:2] == ("served", package)
    assert versions[2][2].startswith(version("mlx-lm") + "-")  # its system_fingerprint


def test_exact_length_false_sends_no_length_fields(dotted):
    knobs = {"base_url": "http://127.0.0.1:9/v1", "max_batch_size": 1, "read_timeout_s": 1.0}
    fair = OpenAI({**knobs, "exact_length": True}, dotted).length_fields(7)
    assert fair == {"ignore_eos": True, "min_tokens": 7, "logit_bias": {"0": -1e9, "14": -1e9}}
    assert OpenAI({**knobs, "exact_length": False}, dotted).length_fields(7) == {}
