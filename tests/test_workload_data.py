"""Workloads from data: seeded length distributions and request datasets (ShareGPT-style
and plain), on the shipped tiny checkpoint's tokenizer; one real closed-loop run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import duckdb
import pytest
from test_declaration import dump, valid_doc
from tokenizers import Tokenizer

from runner.experiments.declaration import DeclarationError, Workload, load, parse
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress
from runner.experiments.workloads.lengths import LengthDist
from runner.experiments.workloads.workload import PromptStream, WorkloadError

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "runner" / "models" / "tiny"
SHIPPED = REPO / "reports" / "experiments" / "data" / "heldout-requests.jsonl"


def declared(workload: dict):
    doc = valid_doc(TINY)
    doc["workload"] = {**doc["workload"], **workload}
    return parse(dump(doc).encode(), source="x.toml", name="x")


def workload(**kw) -> Workload:
    base = dict(prompts="heldout", requests_per_client=2, prompt_tokens=(8, 64), max_new_tokens=32)
    return Workload(**{**base, **kw})


def test_a_lognormal_declaration_draws_seeded_lengths_within_its_bounds():
    exp = declared(
        {
            "prompt_tokens": {"dist": "lognormal", "mean": 24, "sigma": 0.8, "min": 8, "max": 64},
            "max_new_tokens": {"dist": "lognormal", "mean": 12, "sigma": 0.5, "min": 2, "max": 32},
        }
    )
    w = exp.workload
    assert w.prompt_tokens == (8, 64) and w.max_new_tokens == 32
    assert w.prompt_dist == LengthDist("lognormal", 8, 64, 24.0, 0.8)
    a, b = (PromptStream(w, 5, TINY, width=2) for _ in range(2))
    lengths = [len(a.prompt_of(k)) for k in range(200)]
    asked = [a.new_tokens(k) for k in range(200)]
    assert lengths == [len(b.prompt_of(k)) for k in range(200)] and asked == [
        b.new_tokens(k) for k in range(200)
    ]
    assert min(lengths) >= 8 and max(lengths) <= 64 and 18 <= sum(lengths) / 200 <= 30
    assert min(asked) >= 2 and max(asked) <= 32 and len(set(asked)) > 5
    assert 'prompt_tokens = { dist = "lognormal", mean = 24.0' in exp.to_toml()


def test_a_list_and_a_uniform_table_draw_the_same_lengths_as_before():
    old = PromptStream(workload(), 9, TINY, width=1)
    table = PromptStream(workload(prompt_dist=LengthDist("uniform", 8, 64)), 9, TINY, width=1)
    assert [old.prompt_of(k) for k in range(50)] == [table.prompt_of(k) for k in range(50)]
    assert {old.new_tokens(k) for k in range(50)} == {32}


@pytest.mark.parametrize(
    "value, key, reason",
    [
        ({"dist": "zipf", "min": 1, "max": 9}, "workload.prompt_tokens.dist", "expected one of 'uniform'"),
        ({"dist": "lognormal", "mean": 9, "min": 1, "max": 9}, "workload.prompt_tokens.sigma", "needs sigma"),
        (
            {"dist": "lognormal", "mean": 90, "sigma": 1, "min": 1, "max": 9},
            "workload.prompt_tokens.mean",
            "between",
        ),
        (
            {"dist": "lognormal", "mean": 5, "sigma": -1, "min": 1, "max": 9},
            "workload.prompt_tokens.sigma",
            "(0, 5]",
        ),
        ({"dist": "uniform", "min": 9, "max": 1}, "workload.prompt_tokens.min", "1 <= min <= max"),
        ({"dist": "uniform", "min": 1, "max": 9, "mean": 3}, "workload.prompt_tokens.mean", "not a key"),
    ],
)
def test_a_bad_distribution_is_one_error_naming_the_file_and_field(value, key, reason):
    with pytest.raises(DeclarationError) as err:
        declared({"prompt_tokens": value})
    assert (
        len(err.value.issues) == 1
        and str(err.value).startswith(f"x.toml: {key}: ")
        and reason in str(err.value)
    )


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_a_sharegpt_record_is_its_first_user_turn_and_its_first_answer_length(tmp_path):
    tok = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    question, answer = "def add(a, b):\n    return a + b\n", "print(add(1, 2))\n"
    data = write(
        tmp_path / "chat.jsonl",
        [
            {
                "id": "x",
                "conversations": [
                    {"from": "system", "value": "ignored"},
                    {"from": "human", "value": question},
                    {"from": "gpt", "value": answer},
                    {"from": "human", "value": "and a later turn, ignored"},
                ],
            }
        ],
    )
    stream = PromptStream(workload(prompts=str(data), prompt_tokens=(1, 64)), 1, TINY, width=1)
    assert stream.prompt_of(0) == tok.encode(question, add_special_tokens=False).ids
    assert stream.new_tokens(0) == len(tok.encode(answer, add_special_tokens=False).ids)
    assert stream.prompt_of(3) == stream.prompt_of(0)  # one record serves every request


@pytest.mark.parametrize(
    "line, where",
    [
        ("{not json", ":2: not a JSON object"),
        ({"prompt": "x", "output_tokens": 0}, ":2: field 'output_tokens': expected a positive integer"),
        ({"prompt": "", "output_tokens": 3}, ":2: field 'prompt': expected non-empty text"),
        (
            {"conversations": [{"from": "human", "value": "q"}]},
            ":2: field 'conversations': needs a user turn",
        ),
        ({"conversations": [{"from": "human"}]}, ":2: field 'conversations[0]': expected string 'from'"),
        ({"prompt_text": "x"}, ":2: expected a ShareGPT record ('conversations') or a plain one"),
    ],
)
def test_a_malformed_dataset_line_is_one_error_naming_file_line_and_field(tmp_path, line, where):
    data = write(tmp_path / "bad.jsonl", [{"prompt": "fine", "output_tokens": 3}, line])
    with pytest.raises(WorkloadError) as err:
        PromptStream(workload(prompts=str(data), prompt_tokens=(1, 64)), 1, TINY, width=1)
    assert str(err.value).startswith(f"{data}{where}"), str(err.value)


def test_the_shipped_dataset_reads_and_every_request_is_sent_with_its_own_length(tmp_path):
    records = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    assert len(records) == 64 and all(r["output_tokens"] >= 1 for r in records)
    stream = PromptStream(
        workload(prompts=str(SHIPPED), prompt_tokens=(16, 256), max_new_tokens=300), 3, TINY, 1
    )
    assert sorted(stream.new_tokens(k) for k in range(64)) == sorted(r["output_tokens"] for r in records)
    # A real closed-loop run on a small plain dataset: each request asks for its record's length.
    data = write(
        tmp_path / "small.jsonl",
        [{"prompt": f"import os{i}\n" * 3, "output_tokens": n} for i, n in enumerate((2, 5, 3))],
    )
    decl = tmp_path / "small.toml"
    doc = valid_doc(TINY)
    doc["workload"] = {
        **doc["workload"],
        "prompts": str(data),
        "prompt_tokens": [4, 64],
        "min_cell_seconds": 0,
    }
    doc["arms"] = {"ours": {"compile": False}}
    decl.write_text(dump(doc))
    exp = dataclasses.replace(load(decl), rounds=1)
    db = tmp_path / "runs.duckdb"
    assert run_experiment(exp, db, Progress(mode="plain")).completed == 2
    con = duckdb.connect(str(db), read_only=True)
    asked = con.execute("SELECT DISTINCT asked_tokens FROM requests ORDER BY 1").fetchall()
    got = con.execute("SELECT count(*) FROM requests WHERE output_tokens = asked_tokens").fetchall()
    total = con.execute("SELECT count(*) FROM requests").fetchall()
    con.close()
    assert asked == [(2,), (3,), (5,)] and got == total
