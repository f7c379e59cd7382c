"""The declaration keys of open-loop arrivals (workload.arrivals, workload.script) and the
SLO (workload.slo): each form parses and round-trips through to_toml, and every bad
value is one error naming the file and the key. Validated against a real random
checkpoint (max_position_embeddings 4096)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.experiments.declaration import DeclarationError, ScriptEntry, load, parse

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = {"at": 0.3, "prompt_tokens": 1600, "max_new_tokens": 16, "label": "long", "lane": 1}


def toml(v) -> str:
    """A TOML value; tables inline (so a script is an array of inline tables)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or c in '"\\\x7f' else c for c in v) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml(k)} = {toml(x)}" for k, x in v.items()) + "}"
    return repr(v)


def dump(d: dict) -> str:
    lines = [f"{toml(k)} = {toml(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines += ["", f"[{toml(k)}]"] + [f"{toml(x)} = {toml(y)}" for x, y in v.items()]
    return "\n".join(lines) + "\n"


def doc(model, **workload) -> dict:
    w = {"prompts": "heldout", "max_new_tokens": 8, **workload}
    return {
        "title": "t",
        "model": str(model),
        "seed": 7,
        "concurrency": [1, 2],
        "workload": {k: v for k, v in w.items() if v is not None},
        "engine": {"max_batch_size": 2},
        "arms": {"a": {}},
    }


def parsed(d: dict):
    return parse(dump(d).encode(), source="x.toml", name="x")


def problems(d: dict) -> list[tuple[str, str]]:
    with pytest.raises(DeclarationError) as e:
        parsed(d)
    assert all(i.file == "x.toml" for i in e.value.issues)
    return [(i.key, i.reason) for i in e.value.issues]


def script_doc(model, *entries, **workload) -> dict:
    return doc(model, arrivals="script", script=list(entries), **workload)


def test_the_three_forms_parse_and_round_trip(tiny_checkpoint):
    closed = parsed(doc(tiny_checkpoint, requests_per_client=2, prompt_tokens=[8, 16]))
    poisson = parsed(
        doc(
            tiny_checkpoint,
            prompt_tokens=[8, 16],
            arrivals={"process": "poisson", "rate": 2.5},
            slo={"ttft_ms": 500.0, "tpot_ms": 50},
        )
    )
    script = parsed(script_doc(tiny_checkpoint, {"at": 0, "prompt_tokens": 20}, LONG))
    assert (closed.workload.arrivals, closed.workload.rate, closed.workload.script) == ("closed", None, ())
    assert (closed.workload.slo_ttft_ms, closed.workload.slo_tpot_ms) == (None, None)
    w = poisson.workload
    assert (w.arrivals, w.rate, w.requests_per_client, w.slo_ttft_ms, w.slo_tpot_ms) == (
        "poisson",
        2.5,
        1,
        500.0,
        50.0,
    )
    w = script.workload
    assert w.script == (ScriptEntry(0.0, 20, 8, None, 0), ScriptEntry(0.3, 1600, 16, "long", 1))
    assert (w.prompt_tokens, w.max_new_tokens, w.max_context) == ((20, 1600), 8, 1616)
    for exp in (closed, poisson, script):
        again = parse(exp.to_toml().encode(), source="y.toml", name="x")
        assert again.workload == exp.workload
    quick = script.shrunk().workload
    assert [e.max_new_tokens for e in quick.script] == [8, 16] and quick.min_cell_seconds == 0


def test_a_script_entry_needs_its_new_tokens_without_a_workload_default(tiny_checkpoint):
    d = script_doc(tiny_checkpoint, {"at": 0, "prompt_tokens": 20}, LONG, max_new_tokens=None)
    assert problems(d) == [
        (
            "workload.script[0].max_new_tokens",
            "required key is missing (or set workload.max_new_tokens for every entry)",
        )
    ]
    d["workload"]["script"][0]["max_new_tokens"] = 4
    assert parsed(d).workload.max_new_tokens == 16  # the longest entry's


BAD = [
    (dict(arrivals="poisson", prompt_tokens=[8, 16]), "workload.arrivals", "poisson arrivals need a rate"),
    (dict(arrivals="open", prompt_tokens=[8, 16]), "workload.arrivals", 'expected "closed", "script" or'),
    (dict(arrivals=3, prompt_tokens=[8, 16]), "workload.arrivals", "got 3"),
    (
        dict(arrivals={"process": "weibull", "rate": 1.0}, prompt_tokens=[8, 16]),
        "workload.arrivals.process",
        'expected "poisson" or "gamma"',
    ),
    (
        dict(arrivals={"process": "gamma", "rate": 1.0}, prompt_tokens=[8, 16]),
        "workload.arrivals.burstiness",
        "required key is missing",
    ),
    (
        dict(arrivals={"rate": 1.0}, prompt_tokens=[8, 16]),
        "workload.arrivals.process",
        "required key is missing",
    ),
    (
        dict(arrivals={"process": "poisson"}, prompt_tokens=[8, 16]),
        "workload.arrivals.rate",
        "required key is missing",
    ),
    (
        dict(arrivals={"process": "poisson", "rate": 0}, prompt_tokens=[8, 16]),
        "workload.arrivals.rate",
        "must be > 0",
    ),
    (
        dict(arrivals={"process": "poisson", "rate": 1e9}, prompt_tokens=[8, 16]),
        "workload.arrivals.rate",
        "must be <= 10000",
    ),
    (
        dict(arrivals={"process": "poisson", "rate": 1, "burst": 2}, prompt_tokens=[8, 16]),
        "workload.arrivals.burst",
        "unknown key (known: process, rate, burstiness)",
    ),
    (
        dict(requests_per_client=1, prompt_tokens=[8, 16], script=[{"at": 0, "prompt_tokens": 9}]),
        "workload.script",
        "only with arrivals = \"script\" (arrivals is 'closed')",
    ),
    (dict(prompt_tokens=[8, 16]), "workload.requests_per_client", "required key is missing"),
    (dict(arrivals={"process": "poisson", "rate": 1}), "workload.prompt_tokens", "required key is missing"),
    (
        dict(requests_per_client=1, prompt_tokens=[8, 4090]),
        "workload.prompt_tokens",
        "the longest prompt (4090) + max_new_tokens (8) exceeds the model's max_position_embeddings (4096)",
    ),
    (
        dict(requests_per_client=1, prompt_tokens=[8, 16], slo={"ttft_ms": -5}),
        "workload.slo.ttft_ms",
        "must be > 0",
    ),
    (
        dict(requests_per_client=1, prompt_tokens=[8, 16], slo={"tpot_ms": "fast"}),
        "workload.slo.tpot_ms",
        "expected a finite number",
    ),
    (dict(requests_per_client=1, prompt_tokens=[8, 16], slo={"p99": 1}), "workload.slo.p99", "unknown key"),
    (dict(requests_per_client=1, prompt_tokens=[8, 16], slo=5), "workload.slo", "expected a table"),
]


@pytest.mark.parametrize("workload, key, reason", BAD, ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(BAD)])
def test_bad_arrivals_and_slo_name_file_and_key(tiny_checkpoint, workload, key, reason):
    found = problems(doc(tiny_checkpoint, **workload))
    assert len(found) == 1 and found[0][0] == key and reason in found[0][1], found


ENTRY = {"at": 0.0, "prompt_tokens": 20}
BAD_SCRIPTS = [
    ([], {}, "workload.script", "expected a non-empty list"),
    ([5], {}, "workload.script", "expected a non-empty list"),
    ([{**ENTRY, "lane": 1}], {}, "workload.script", "needs at least one entry with lane 0"),
    (
        [ENTRY, {**ENTRY, "lane": 2}],
        {},
        "workload.script[1].lane",
        "must be below the largest concurrency (2): lane 2 would never be sent",
    ),
    ([ENTRY, {**ENTRY, "lane": -1}], {}, "workload.script[1].lane", "must be >= 0"),
    ([{**ENTRY, "at": -0.1}], {}, "workload.script[0].at", "must be >= 0"),
    ([{"prompt_tokens": 20}], {}, "workload.script[0].at", "required key is missing"),
    ([{"at": 0}], {}, "workload.script[0].prompt_tokens", "required key is missing"),
    ([{**ENTRY, "prompt_tokens": 0}], {}, "workload.script[0].prompt_tokens", "must be >= 1"),
    ([{**ENTRY, "max_new_tokens": 0}], {}, "workload.script[0].max_new_tokens", "must be >= 1"),
    ([{**ENTRY, "label": ""}], {}, "workload.script[0].label", "expected a non-empty string"),
    ([{**ENTRY, "label": "x" * 33}], {}, "workload.script[0].label", "at most 32 characters"),
    ([{**ENTRY, "label": 7}], {}, "workload.script[0].label", "expected a non-empty string"),
    ([{**ENTRY, "client": 0}], {}, "workload.script[0].client", "unknown key (known: at, prompt_tokens"),
    (
        [{**ENTRY, "prompt_tokens": 4090}],
        {},
        "workload.script[0].prompt_tokens",
        "4090 prompt + 8 new tokens exceed the model's max_position_embeddings (4096)",
    ),
    (
        [{**ENTRY, "prompt_tokens": 4}],
        {"shared_prefix_tokens": 4},
        "workload.script[0].prompt_tokens",
        "must be above workload.shared_prefix_tokens (4)",
    ),
    (
        [ENTRY],
        {"requests_per_client": 2},
        "workload.requests_per_client",
        'not used with arrivals = "script"',
    ),
    ([ENTRY], {"prompt_tokens": [8, 16]}, "workload.prompt_tokens", "each script entry gives its own"),
]


@pytest.mark.parametrize(
    "entries, extra, key, reason", BAD_SCRIPTS, ids=[f"{k}-{i}" for i, (_, _, k, _) in enumerate(BAD_SCRIPTS)]
)
def test_bad_scripts_name_file_and_key(tiny_checkpoint, entries, extra, key, reason):
    found = problems(script_doc(tiny_checkpoint, *entries, **extra))
    assert len(found) == 1 and found[0][0] == key and reason in found[0][1], found


def test_a_script_is_required_and_errors_come_from_the_file(tiny_checkpoint, tmp_path):
    path = tmp_path / "open.toml"
    path.write_text(dump(doc(tiny_checkpoint, arrivals="script")))
    with pytest.raises(DeclarationError) as e:
        load(path)
    assert str(e.value) == (
        f'{path}: workload.script: arrivals = "script" needs a script: '
        "[[workload.script]] tables, e.g. { at = 0.0, prompt_tokens = 64, lane = 0 }"
    )


entries = st.lists(
    st.fixed_dictionaries(
        {"at": st.floats(0, 10, allow_nan=False), "prompt_tokens": st.integers(1, 200)},
        optional={
            "max_new_tokens": st.integers(1, 64),
            "lane": st.integers(0, 1),
            "label": st.text("abcxyz-_ ", min_size=1, max_size=8).filter(str.strip),
        },
    ),
    min_size=1,
    max_size=5,
).map(lambda es: [{**es[0], "lane": 0}] + es[1:])
forms = st.one_of(
    st.fixed_dictionaries({"arrivals": st.just("script"), "script": entries}),
    st.fixed_dictionaries(
        {
            "arrivals": st.fixed_dictionaries({"process": st.just("poisson"), "rate": st.floats(0.01, 1000)}),
            "prompt_tokens": st.just([8, 16]),
        },
        optional={"requests_per_client": st.integers(1, 5)},
    ),
)
slos = st.fixed_dictionaries({}, optional={"ttft_ms": st.floats(0.5, 1e4), "tpot_ms": st.floats(0.5, 1e3)})


@SETTINGS
@given(form=forms, slo=slos, data=st.data())
def test_open_loop_declarations_round_trip_and_mutations_are_errors(tiny_checkpoint, form, slo, data):
    d = doc(tiny_checkpoint, **form, **({"slo": slo} if slo else {}))
    exp = parsed(d)
    assert parse(exp.to_toml().encode(), source="y.toml", name="x").workload == exp.workload
    w = d["workload"]
    tables = (
        [w]
        + [t for t in (w.get("slo"), w.get("arrivals")) if isinstance(t, dict)]
        + list(w.get("script", []))
    )
    table = data.draw(st.sampled_from(tables))
    key = data.draw(st.one_of(st.sampled_from(sorted(table)), st.text(min_size=1, max_size=6)))
    table[key] = data.draw(
        st.one_of(
            st.integers(-5, 10**6),
            st.floats(allow_nan=False),
            st.text(max_size=5),
            st.booleans(),
            st.lists(st.integers(-3, 300), max_size=3),
        )
    )
    try:
        dataclasses.asdict(parsed(d))
    except DeclarationError as e:
        assert e.issues and all(i.file == "x.toml" and i.key and i.reason for i in e.issues)
