"""Declaring arms on other runtimes: every knob is checked against the arm's runtime,
and a knob the runtime lacks is an error naming the key and the runtime."""

import textwrap

import pytest

from runner.experiments.declaration import DeclarationError, load

HEAD = """\
title = "runtimes"
model = "tiny"
seed = 5
concurrency = [1, 2]

[workload]
prompts = "heldout"
requests_per_client = 1
prompt_tokens = [8, 16]
max_new_tokens = 4
"""


def issues(tmp_path, arms: str) -> list:
    decl = tmp_path / "arms.toml"
    decl.write_text(HEAD + textwrap.dedent(arms))
    with pytest.raises(DeclarationError) as err:
        load(decl)
    assert all(i.file == str(decl) for i in err.value.issues)
    return err.value.issues


def test_a_knob_a_runtime_lacks_names_the_key_and_the_runtime(tmp_path):
    found = issues(
        tmp_path,
        """
        [engine]
        mtp = false

        [arms.mlx]
        runtime = "mlx-lm"
        max_batch_size = 2

        [arms.remote]
        runtime = "openai"
        base_url = "http://127.0.0.1:8080/v1"
        max_batch_size = 8
        prefill_chunk = 64

        [arms.ours]
        max_batch_size = 2
        draft_model = "tiny"

        [arms.what]
        runtime = "vllm"
        """,
    )
    by_key = {}
    for i in found:
        by_key.setdefault(i.key, []).append(i.reason)
    assert (
        by_key["engine.mtp"][0].startswith("runtime 'mlx-lm' has no knob 'mtp'; it is a knob of bothrows")
        and "(arm 'mlx')" in by_key["engine.mtp"][0]
    )
    assert by_key["arms.remote.prefill_chunk"][0].startswith("runtime 'openai' has no knob 'prefill_chunk'")
    assert by_key["arms.ours.draft_model"][0].startswith(
        "runtime 'bothrows' has no knob 'draft_model'; it is a knob of mlx-lm, mlx-lm-server"
    )
    assert by_key["arms.what.runtime"][0].startswith("unknown runtime 'vllm'")
    assert any("must contain the ceiling: 8 for arm 'remote'" in r for r in by_key["concurrency"])


def test_server_knobs_are_checked_and_an_openai_arm_states_its_ceiling(tmp_path):
    found = {
        i.key: i.reason
        for i in issues(
            tmp_path,
            """
        [arms.remote]
        runtime = "openai"
        base_url = "ftp://somewhere"

        [arms.served]
        runtime = "mlx-lm-server"
        max_batch_size = 2
        num_draft_tokens = 0
        read_timeout_s = -1
        prefix_cache_bytes = "lots"
        """,
        )
    }
    assert found["arms.remote.base_url"].startswith("expected an http(s) URL with a host")
    assert found["arms.remote.max_batch_size"].startswith("runtime 'openai' needs max_batch_size")
    assert found["arms.served.num_draft_tokens"] == "needs draft_model (the model that drafts)"
    assert found["arms.served.read_timeout_s"] == "expected seconds in (0, 3600], got -1"
    assert "prefix_cache_bytes" in found["arms.served.prefix_cache_bytes"]
