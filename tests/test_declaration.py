"""Experiment declarations: valid ones round-trip, invalid ones give every error at once
(file, key, reason), never a crash. Validated against a real random checkpoint."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.experiments.declaration import DeclarationError, load, parse
from runner.train.random_init import write_random_checkpoint

REPO = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", seed=0)


@pytest.fixture(scope="module")
def ckpt_no_indexer(tmp_path_factory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", seed=1, with_indexer=False)


def dump(value, prefix: str = "") -> str:
    """A minimal TOML writer for test documents (scalars, lists, nested tables)."""
    def scalar(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or c in '"\\\x7f' else c
                                 for c in v) + '"'
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        return repr(v)
    lines = [f'"{k}" = {scalar(v)}' for k, v in value.items() if not isinstance(v, dict)]
    for k, v in value.items():
        if isinstance(v, dict):
            name = f'{prefix}"{k}"'
            lines += ["", f"[{name}]", dump(v, name + ".")]
    return "\n".join(lines)


def valid_doc(model: Path) -> dict:
    return {"title": "t", "model": str(model), "seed": 7, "rounds": 2, "concurrency": [1, 2],
            "workload": {"prompts": "heldout", "requests_per_client": 3, "prompt_tokens": [8, 16],
                         "max_new_tokens": 8, "temperature": 0.0},
            "engine": {"max_batch_size": 2, "prefill_chunk": 32},
            "arms": {"off": {"mtp": False}, "on": {"mtp": True, "draft_policy": "always"}}}


def parsed(doc: dict):
    return parse(dump(doc).encode(), source="x.toml", name="x")


def test_valid_declaration_and_its_knobs(ckpt):
    exp = parsed(valid_doc(ckpt))
    assert exp.concurrency == (1, 2) and exp.rounds == 2 and exp.workload.prompt_tokens == (8, 16)
    assert exp.knobs("on") == {"max_batch_size": 2, "prefill_chunk": 32, "mtp": True, "draft_policy": "always"}
    assert list(exp.arms) == ["off", "on"] and exp.ceiling("off") == 2
    quick = exp.shrunk()
    assert (quick.rounds, quick.workload.requests_per_client, quick.workload.max_new_tokens, quick.quick) == (1, 2, 8, True)


def test_every_error_is_reported_together(ckpt_no_indexer, tmp_path):
    doc = valid_doc(ckpt_no_indexer)
    doc["workload"]["colour"] = "red"
    doc["workload"]["max_new_tokens"] = "many"
    doc["concurrency"] = [2]
    doc["engine"]["index_topk"] = 8
    doc["arms"]["on"]["draft_policy"] = "sometimes"
    path = tmp_path / "broken.toml"
    path.write_text(dump(doc))
    with pytest.raises(DeclarationError) as err:
        load(path)
    keys = [i.key for i in err.value.issues]
    assert set(keys) == {"workload.colour", "workload.max_new_tokens", "concurrency",
                         "engine.index_topk", "arms.on.draft_policy"}
    assert all(i.file == str(path) for i in err.value.issues)
    text = str(err.value)
    assert "must contain 1 (one sequence)" in text and "no indexer weights" in text


def test_missing_model_names_the_model_key(tmp_path):
    doc = valid_doc(tmp_path / "nowhere")
    with pytest.raises(DeclarationError) as err:
        parsed(doc)
    assert [i.key for i in err.value.issues] == ["model"]


def test_syntax_error_names_the_file_and_line(tmp_path):
    with pytest.raises(DeclarationError, match=r"x.toml: \(syntax\): invalid TOML: .*line 2"):
        parse(b'title = "t"\nseed = = 3\n', source="x.toml", name="x")


def test_cli_reports_errors_with_exit_code_2_and_no_traceback(ckpt, tmp_path):
    doc = valid_doc(ckpt)
    doc["rounds"] = 0
    doc["arms"]["on"]["mpt"] = True
    path = tmp_path / "bad.toml"
    path.write_text(dump(doc))
    done = subprocess.run([sys.executable, "-m", "runner.cli", "run", str(path), "--db",
                           str(tmp_path / "db.duckdb")], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{path}: rounds: must be >= 1, got 0" in done.stderr
    assert f"{path}: arms.on.mpt: unknown engine knob(s) ['mpt']" in done.stderr
    assert not (tmp_path / "db.duckdb").exists()  # nothing ran


names = st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=8).filter(
    lambda s: s[0] not in "-")
knob_tables = st.fixed_dictionaries({}, optional={
    "mtp": st.booleans(), "draft_policy": st.sampled_from(["never", "always", "solo", "adaptive", "max_width:2"]),
    "mtp_sync": st.sampled_from(["eager", "lazy"]), "prefill_chunk": st.integers(1, 512),
    "kv_block_size": st.integers(1, 64), "dtype": st.sampled_from(["float32", "bfloat16"]),
    "prefix_cache_bytes": st.sampled_from([0, 1024, "64MB"]), "compile": st.booleans()})


@st.composite
def valid_docs(draw, model: str):
    ceiling = draw(st.integers(1, 8))
    low = draw(st.integers(1, 64))
    doc = {"title": draw(st.text(min_size=1, max_size=20).filter(str.strip)), "model": model,
           "seed": draw(st.integers(0, 2**31)), "rounds": draw(st.integers(1, 5)),
           "concurrency": draw(st.permutations(sorted({1, ceiling} | set(draw(st.lists(st.integers(1, 16), max_size=3)))))),
           "workload": {"prompts": "heldout", "requests_per_client": draw(st.integers(1, 10)),
                        "prompt_tokens": [low, low + draw(st.integers(0, 64))],
                        "max_new_tokens": draw(st.integers(1, 64)),
                        "temperature": draw(st.floats(0, 2, allow_nan=False)),
                        "shared_prefix_tokens": draw(st.integers(0, low - 1))},
           "engine": {**draw(knob_tables), "max_batch_size": ceiling},
           "arms": draw(st.dictionaries(names, knob_tables, min_size=1, max_size=3))}
    return doc


@SETTINGS
@given(data=st.data())
def test_valid_declarations_round_trip(ckpt, data):
    doc = data.draw(valid_docs(str(ckpt)))
    exp = parsed(doc)
    again = parse(exp.to_toml().encode(), source="y.toml", name="x")
    assert again.__dict__ | {"source": "", "sha256": ""} == exp.__dict__ | {"source": "", "sha256": ""}
    assert exp.knobs(next(iter(exp.arms)))["max_batch_size"] == doc["engine"]["max_batch_size"]
    assert list(exp.arms) == list(doc["arms"])


junk = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=10), st.booleans(), st.lists(st.integers(-3, 300), max_size=4),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@SETTINGS
@given(data=st.data())
def test_mutated_declarations_give_errors_not_crashes(ckpt, data):
    doc = data.draw(valid_docs(str(ckpt)))
    for _ in range(data.draw(st.integers(1, 3))):
        tables = [doc] + [t for t in (doc.get("workload"), doc.get("engine")) if isinstance(t, dict)]
        table = data.draw(st.sampled_from(tables))
        key = data.draw(st.one_of(st.sampled_from(sorted(table) or ["x"]), st.text(min_size=1, max_size=6)))
        if data.draw(st.booleans()):
            table.pop(key, None)
        else:
            table[key] = data.draw(junk)
    try:
        parsed(doc)
    except DeclarationError as e:
        assert e.issues and all(i.file == "x.toml" and i.key and i.reason for i in e.issues)


@SETTINGS
@given(text=st.text(max_size=200))
def test_arbitrary_text_gives_errors_not_crashes(text):
    with pytest.raises(DeclarationError):
        parse(text.encode(), source="x.toml", name="x")
