"""The seeded workload, on a real random checkpoint's tokenizer and held-out texts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from runner.experiments.declaration import Workload
from runner.experiments.workloads.workload import PromptStream, WorkloadError, read_texts
from runner.train.random_init import write_random_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", seed=3)


def workload(**kw) -> Workload:
    base = dict(prompts="heldout", requests_per_client=4, prompt_tokens=(10, 40), max_new_tokens=8)
    return Workload(**{**base, **kw})


def build_prompts(w: Workload, seed: int, ckpt: Path, clients: int, n: int = 4) -> list[list[list[int]]]:
    stream = PromptStream(w, seed, ckpt, width=clients)
    return [[stream.prompt(c, i) for i in range(n)] for c in range(clients)]


def test_same_seed_same_prompts_and_lengths_in_range(ckpt):
    a = build_prompts(workload(), 7, ckpt, clients=3)
    assert a == build_prompts(workload(), 7, ckpt, clients=3)
    assert a != build_prompts(workload(), 8, ckpt, clients=3)
    assert [len(c) for c in a] == [4, 4, 4]
    lengths = [len(p) for c in a for p in c]
    assert all(10 <= n <= 40 for n in lengths) and len(set(lengths)) > 1
    assert len({tuple(p) for c in a for p in c}) == 12  # no two requests share a prompt


def test_the_stream_is_unbounded_and_the_same_whatever_order_it_is_read_in(ckpt):
    forward = PromptStream(workload(), 7, ckpt, width=3)
    backward = PromptStream(workload(), 7, ckpt, width=3)
    keys = [(c, i) for i in range(200) for c in range(3)]  # far past requests_per_client
    first = {k: forward.prompt(*k) for k in keys}
    assert {k: backward.prompt(*k) for k in reversed(keys)} == first
    # a prefix of a longer stream: what a short cell sends, a long one sends first
    assert build_prompts(workload(), 7, ckpt, clients=3, n=4) == [
        [first[(c, i)] for i in range(4)] for c in range(3)
    ]


def test_request_ids_are_unique_and_name_client_and_index(ckpt):
    stream = PromptStream(workload(), 7, ckpt, width=4)
    ids = {stream.request_id(c, i): (c, i) for c in range(4) for i in range(1000)}
    assert len(ids) == 4000 and set(ids) == set(range(4000))
    assert all((k % 4, k // 4) == ci for k, ci in ids.items())
    with pytest.raises(ValueError, match="4 clients wide"):
        stream.request_id(4, 0)


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
    """Raised when the stream is made, before any cell runs."""
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": "a", "text": "fine"}\n{"id": "b"}\n')
    with pytest.raises(WorkloadError, match=r"bad.jsonl:2: expected an object with a string 'text'"):
        build_prompts(workload(prompts=str(src)), 0, ckpt, clients=1)
    src.write_text('{"id": "a", "text": "tiny"}\n')
    with pytest.raises(WorkloadError, match="needs more text than the whole file holds"):
        PromptStream(workload(prompts=str(src), prompt_tokens=(500, 500)), 0, ckpt, width=1)
    src.write_text("")
    with pytest.raises(WorkloadError, match="holds no prompts"):
        build_prompts(workload(prompts=str(src)), 0, ckpt, clients=1)
