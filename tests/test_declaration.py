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
            return (
                '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or c in '"\\\x7f' else c for c in v) + '"'
            )
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
    return {
        "title": "t",
        "model": str(model),
        "seed": 7,
        "rounds": 2,
        "concurrency": [1, 2],
        "workload": {
            "prompts": "heldout",
            "requests_per_client": 3,
            "prompt_tokens": [8, 16],
            "max_new_tokens": 8,
            "temperature": 0.0,
        },
        "engine": {"max_batch_size": 2, "prefill_chunk": 32},
        "arms": {"off": {"mtp": False}, "on": {"mtp": True, "draft_policy": "always"}},
    }


def parsed(doc: dict):
    return parse(dump(doc).encode(), source="x.toml", name="x")


def test_valid_declaration_and_its_knobs(ckpt):
    exp = parsed(valid_doc(ckpt))
    assert exp.concurrency == (1, 2) and exp.rounds == 2 and exp.workload.prompt_tokens == (8, 16)
    assert exp.knobs("on") == {
        "max_batch_size": 2,
        "prefill_chunk": 32,
        "mtp": True,
        "draft_policy": "always",
    }
    assert list(exp.arms) == ["off", "on"] and exp.ceiling("off") == 2
    quick = exp.shrunk()
    assert (quick.rounds, quick.workload.requests_per_client, quick.workload.max_new_tokens, quick.quick) == (
        1,
        2,
        8,
        True,
    )
    assert (quick.workload.min_cell_seconds, quick.workload.min_cell_tokens) == (0.0, 0)


def test_cells_are_sized_by_time_by_default_over_three_rounds(ckpt):
    doc = valid_doc(ckpt)
    del doc["rounds"]
    exp = parsed(doc)
    assert (exp.rounds, exp.workload.min_cell_seconds, exp.workload.min_cell_tokens) == (3, 2.5, 0)
    doc["workload"].update(min_cell_seconds=0.5, min_cell_tokens=300)
    w = parsed(doc).workload
    assert (w.min_cell_seconds, w.min_cell_tokens) == (0.5, 300)
    assert parse(parsed(doc).to_toml().encode(), source="y.toml", name="x").workload == w


@pytest.mark.parametrize(
    "key, value, reason",
    [
        ("min_cell_seconds", -1, "must be >= 0, got -1"),
        ("min_cell_seconds", "long", "expected a finite number, got 'long'"),
        ("min_cell_seconds", float("inf"), "expected a finite number, got inf"),
        ("min_cell_seconds", float("nan"), "expected a finite number, got nan"),
        ("min_cell_seconds", 7200, "must be <= 3600, got 7200"),
        ("min_cell_tokens", 2.5, "expected an integer, got 2.5"),
        ("min_cell_tokens", -3, "must be >= 0, got -3"),
        ("min_cell_tokens", True, "expected an integer, got True"),
        ("min_cell_tokens", 10**9, "must be <= 1e+08, got 1000000000"),
    ],
)
def test_bad_cell_minimums_name_file_key_and_reason(ckpt, key, value, reason):
    doc = valid_doc(ckpt)
    doc["workload"][key] = value
    with pytest.raises(DeclarationError) as err:
        parsed(doc)
    assert [str(i) for i in err.value.issues] == [f"x.toml: workload.{key}: {reason}"]


def test_cell_minimums_belong_under_workload(ckpt):
    doc = valid_doc(ckpt)
    doc["min_cell_seconds"] = 1.0
    with pytest.raises(DeclarationError, match=r"x.toml: min_cell_seconds: unknown key"):
        parsed(doc)


def test_two_identical_arms_are_a_valid_declaration(ckpt):
    doc = valid_doc(ckpt)
    doc["arms"] = {"a": {"mtp": True}, "b": {"mtp": True}}
    exp = parsed(doc)
    assert list(exp.arms) == ["a", "b"] and exp.knobs("a") == exp.knobs("b")


def test_aa_is_the_arm_against_an_identical_copy_under_its_own_name(ckpt):
    exp = parsed(valid_doc(ckpt))
    aa = exp.aa("on")
    assert aa.name == "x-aa" and list(aa.arms) == ["on", "on-aa"]
    assert aa.knobs("on") == aa.knobs("on-aa") == exp.knobs("on")
    assert (aa.workload, aa.concurrency, aa.rounds, aa.seed, aa.engine) == (
        exp.workload,
        exp.concurrency,
        exp.rounds,
        exp.seed,
        exp.engine,
    )
    assert aa.sha256 not in (exp.sha256, exp.aa("off").sha256) and aa.sha256 == exp.aa("on").sha256
    assert exp.arms["on"] == {"mtp": True, "draft_policy": "always"}  # the original is untouched
    with pytest.raises(DeclarationError) as err:
        exp.aa("of")
    assert str(err.value) == "x.toml: --aa: no arm named 'of'; the arms are off, on"


def test_cli_aa_with_an_unknown_arm_lists_the_arms(ckpt, tmp_path, capsys):
    from runner.cli import main as cli

    path = tmp_path / "two.toml"
    path.write_text(dump(valid_doc(ckpt)))
    assert cli(["run", str(path), "--aa", "nope", "--check"]) == 2
    assert capsys.readouterr().err == f"error: {path}: --aa: no arm named 'nope'; the arms are off, on\n"
    assert cli(["run", str(path), "--aa", "on", "--check"]) == 0
    assert "valid (2 arms" in capsys.readouterr().out


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
    assert set(keys) == {
        "workload.colour",
        "workload.max_new_tokens",
        "concurrency",
        "engine.index_topk",
        "arms.on.draft_policy",
    }
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
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(path), "--db", str(tmp_path / "db.duckdb")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{path}: rounds: must be >= 1, got 0" in done.stderr
    assert f"{path}: arms.on.mpt: unknown engine knob(s) ['mpt']" in done.stderr
    assert not (tmp_path / "db.duckdb").exists()  # nothing ran


names = st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=8).filter(
    lambda s: s[0] not in "-"
)
knob_tables = st.fixed_dictionaries(
    {},
    optional={
        "mtp": st.booleans(),
        "draft_policy": st.sampled_from(["never", "always", "solo", "adaptive", "max_width:2"]),
        "mtp_sync": st.sampled_from(["eager", "lazy"]),
        "prefill_chunk": st.integers(1, 512),
        "kv_block_size": st.integers(1, 64),
        "dtype": st.sampled_from(["float32", "bfloat16"]),
        "prefix_cache_bytes": st.sampled_from([0, 1024, "64MB"]),
        "compile": st.booleans(),
    },
)


@st.composite
def valid_docs(draw, model: str):
    ceiling = draw(st.integers(1, 8))
    low = draw(st.integers(1, 64))
    doc = {
        "title": draw(st.text(min_size=1, max_size=20).filter(str.strip)),
        "model": model,
        "seed": draw(st.integers(0, 2**31)),
        "rounds": draw(st.integers(1, 5)),
        "concurrency": draw(
            st.permutations(sorted({1, ceiling} | set(draw(st.lists(st.integers(1, 16), max_size=3)))))
        ),
        "workload": {
            "prompts": "heldout",
            "requests_per_client": draw(st.integers(1, 10)),
            "prompt_tokens": [low, low + draw(st.integers(0, 64))],
            "max_new_tokens": draw(st.integers(1, 64)),
            "temperature": draw(st.floats(0, 2, allow_nan=False)),
            "shared_prefix_tokens": draw(st.integers(0, low - 1)),
            "min_cell_seconds": draw(st.floats(0, 100, allow_nan=False)),
            "min_cell_tokens": draw(st.integers(0, 10**4)),
        },
        "engine": {**draw(knob_tables), "max_batch_size": ceiling},
        "arms": draw(st.dictionaries(names, knob_tables, min_size=1, max_size=3)),
    }
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


junk = st.one_of(
    st.integers(-5, 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    st.booleans(),
    st.lists(st.integers(-3, 300), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


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
