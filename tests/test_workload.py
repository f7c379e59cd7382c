"""The seeded workload, on a real random checkpoint's tokenizer and held-out texts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from runner.experiments.declaration import Workload
from runner.experiments.workload import WorkloadError, build_prompts, read_texts
from runner.train.random_init import write_random_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", seed=3)


def workload(**kw) -> Workload:
    base = dict(prompts="heldout", requests_per_client=4, prompt_tokens=(10, 40), max_new_tokens=8)
    return Workload(**{**base, **kw})


def test_same_seed_same_prompts_and_lengths_in_range(ckpt):
    a = build_prompts(workload(), 7, ckpt, clients=3)
    assert a == build_prompts(workload(), 7, ckpt, clients=3)
    assert a != build_prompts(workload(), 8, ckpt, clients=3)
    assert [len(c) for c in a] == [4, 4, 4]
    lengths = [len(p) for c in a for p in c]
    assert all(10 <= n <= 40 for n in lengths) and len(set(lengths)) > 1
    # fewer clients see the same first clients' prompts: every concurrency replays them
    assert build_prompts(workload(), 7, ckpt, clients=1) == a[:1]


def test_prompts_are_held_out_text(ckpt):
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    corpus = "".join(read_texts(ckpt / "heldout.jsonl"))
    for client in build_prompts(workload(), 1, ckpt, clients=2):
        for prompt in client:
            assert tok.decode(prompt) in corpus + corpus  # texts wrap around at the end


def test_shared_prefix_is_the_same_for_every_request(ckpt):
    prompts = [p for c in build_prompts(workload(shared_prefix_tokens=6), 5, ckpt, clients=2) for p in c]
    assert len({tuple(p[:6]) for p in prompts}) == 1
    assert len({tuple(p[6:12]) for p in prompts}) > 1


def test_short_texts_are_joined(tmp_path, ckpt):
    src = tmp_path / "short.jsonl"
    src.write_text("\n".join(json.dumps({"id": str(i), "text": f"word{i} and"}) for i in range(30)))
    prompts = build_prompts(workload(prompts=str(src), prompt_tokens=(25, 25)), 0, ckpt, clients=1)
    assert [len(p) for p in prompts[0]] == [25] * 4


def test_bad_prompt_files_name_file_and_line(tmp_path, ckpt):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": "a", "text": "fine"}\n{"id": "b"}\n')
    with pytest.raises(WorkloadError, match=r"bad.jsonl:2: expected an object with a string 'text'"):
        build_prompts(workload(prompts=str(src)), 0, ckpt, clients=1)
    src.write_text('{"id": "a", "text": "tiny"}\n')
    with pytest.raises(WorkloadError, match="needs more text than the whole file holds"):
        build_prompts(workload(prompts=str(src), prompt_tokens=(500, 500)), 0, ckpt, clients=1)
    src.write_text("")
    with pytest.raises(WorkloadError, match="holds no prompts"):
        build_prompts(workload(prompts=str(src)), 0, ckpt, clients=1)
