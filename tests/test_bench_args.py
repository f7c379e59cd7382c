"""`runner bench`'s argument errors: one line and exit code 2, before anything is timed."""

import re
import shutil
from pathlib import Path

import pytest

from runner.cli import main as cli_main


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--mtp", "--seqs", "1,5"], "--seqs expects comma-separated sequence counts from 1 to 4, got '1,5'"),
        (["--mtp", "--seqs", "two"], "--seqs expects comma-separated sequence counts from 1 to 4, got 'two'"),
        (["--pass-cost", "--layers", "0"], "--layers expects comma-separated positive integers, got '0'"),
        (["--rounds", "0"], "--rounds and --repeats must be at least 1"),
        (["--mtp", "--draft-tokens", "17"], "--draft-tokens expects a count from 1 to 16, got 17"),
        (["--mtp", "--prompt-tokens", "4"], "--prompt-tokens expects a count from 8 to 512, got 4"),
    ],
)
def test_bad_bench_arguments_exit_2_with_one_line(argv, message, capsys):
    assert cli_main(["bench", "--no-openblas", *argv]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"runner bench: {message}"]


def test_an_unknown_arm_is_one_line_naming_the_known_ones(capsys):
    assert cli_main(["bench", "--no-openblas", "--mtp", "--arms", "off,block-9"]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("runner bench --mtp: unknown arm(s) ['block-9']; known: [")
    assert "'block-8'" in out[0] and "'mtp-chain'" in out[0] and "'adaptive'" in out[0]


def test_a_block_arm_on_a_checkpoint_without_a_block_drafter_is_one_clear_line(tmp_path, capsys):
    """Checked before any engine loads: the arm, the checkpoint and the missing file."""
    shipped = Path(__file__).resolve().parents[1] / "runner" / "models" / "tiny"
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(shipped / "config.json", bare / "config.json")
    assert cli_main(["bench", "--no-openblas", "--mtp", "--model", str(bare), "--arms", "off,block-8"]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"runner bench --mtp: arm block-8: engine knob drafter: {bare} has no block drafter "
        '(block_drafter/block_drafter.safetensors); use drafter = "mtp" or train one with runner train '
        "--drafter block"
    ]


def test_the_drafting_table_gives_each_arm_its_pass_time_beside_its_tokens_per_row_pass(capsys):
    """The two figures a drafting arm's gain over `off` is made of, from a real (tiny) run."""
    argv = ["--mtp", "--arms", "off,mtp-chain", "--seqs", "1", "--rounds", "1", "--repeats", "1"]
    assert not cli_main(["bench", "--no-openblas", *argv, "--tokens", "12"])
    lines = capsys.readouterr().out.splitlines()
    assert "tokens/row-pass  ms/pass" in next(line for line in lines if line.startswith("arm "))
    # drafted/passes, acceptance, tokens per row-pass, ms per pass
    figures = re.compile(r"(\S+)/(\S+)\s+(\S+)%\s+(\S+)\s+(\S+)\s")
    rows = {
        line.split()[0]: figures.search(line)
        for line in lines
        if line.split()[:1] in (["off"], ["mtp-chain"])
    }
    assert set(rows) == {"off", "mtp-chain"}
    assert float(rows["off"][4]) == 0.0 and float(rows["mtp-chain"][4]) > 1.0
    assert all(float(m[5]) > 0.0 for m in rows.values())
    # greedy drafting leaves the output token for token what no drafting gives
    assert all(" yes " in line for line in lines if line.split()[:1] == ["mtp-chain"])


def test_every_width_runs_the_same_prompts_each_round():
    """Acceptance follows the prompts: one sequence and the ceiling must see the same ones."""
    from runner.bench.mtp_ab import round_prompts

    assert round_prompts((1, 4)) == 4 and round_prompts((1, 2, 4)) == 4 and round_prompts((1, 2, 3, 4)) == 12
    assert round_prompts((1,)) == 1


def test_the_unseen_text_set_runs_and_names_its_packages(capsys):
    """The drafting A/B on third-party code: the header names the set by its packages'
    versions and a hash of the prompts, so two figures on different sets are told apart."""
    argv = ["--mtp", "--arms", "off,mtp", "--seqs", "1", "--rounds", "1", "--repeats", "1"]
    assert not cli_main(["bench", "--no-openblas", *argv, "--tokens", "8", "--prompts", "unseen"])
    out = capsys.readouterr().out
    assert "prompts of 48 tokens" in out and "from the unseen-text prompts (jinja2 " in out
    assert re.search(
        r"\d+ prompts sha256 [0-9a-f]{12}\), a seeded sample of 2 of \d+, from [12] packages", out
    )


def test_the_bench_samples_prompts_from_the_whole_set_the_same_every_run():
    """The sets run package by package (module by module): the first prompts were all
    jinja2's, which the block drafter lands far better than the set as a whole."""
    from types import SimpleNamespace

    from runner.bench.mtp_ab import prompt_pool
    from runner.engine.checkpoint import load_tokenizer
    from runner.unseen_text import unseen_prompts

    deep = Path(__file__).resolve().parents[1] / "runner" / "models" / "deep"
    engine = SimpleNamespace(tokenizer=load_tokenizer(deep), checkpoint_dir=deep)
    pool, where = prompt_pool(engine, "unseen", 24, 96)
    again, _ = prompt_pool(engine, "unseen", 24, 96)
    assert pool == again and len(pool) == 24 and len({tuple(p) for p in pool}) == 24
    assert all(len(p) == 96 for p in pool)
    texts = {tuple(engine.tokenizer.encode(p.text).ids[:96]): p.id for p in unseen_prompts()}
    packages = {texts[tuple(p)].split("/")[0] for p in pool}
    assert len(packages) >= 5 and f"from {len(packages)} packages" in where
    held, where = prompt_pool(engine, "heldout", 24, 96)
    assert len(held) == 24 and re.search(r"a seeded sample of 24 of \d+, from \d+ modules", where)


def test_the_exp_bench_times_every_pass_shape_both_ways(capsys):
    """A real (tiny) run: a line per pass shape, the block drafter's included, each with
    both engines' times and the paired ratio's median and spread."""
    assert not cli_main(["bench", "--no-openblas", "--exp", "--rounds", "1"])
    lines = capsys.readouterr().out.splitlines()
    row = re.compile(r"^(.+?)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d{3})x \[(\d+\.\d{3}), (\d+\.\d{3})\]$")
    rows = {m.group(1): m.groups()[1:] for m in map(row.match, lines) if m}
    assert set(rows) == {
        "1 row x 1 token",
        "1 row x 5 tokens",
        "1 row x 9 tokens",
        "4 rows x 1 token",
        "4 rows x 9 tokens",
        "drafter, 1 row x 8 drafts",
        "drafter, 4 rows x 8 drafts",
    }
    for mlx_ms, fused_ms, median, p10, p90 in rows.values():
        assert float(mlx_ms) > 0 and float(fused_ms) > 0 and float(p10) <= float(median) <= float(p90)


def test_the_mtp_bench_reads_a_batch_by_its_last_row_and_one_sequence_as_itself():
    """A real (tiny) engine drafting k = 4: a batch's rate is its tokens over its decode
    span, which its last row ends; the mean of the rows' own rates counts a row that
    finished early at its own pace. A batch of one reads as that row's own rate."""
    from runner.bench.mtp_ab import ARMS, decode_span, measure
    from runner.engine.engine import Engine

    engine = Engine.from_pretrained("tiny", max_batch_size=2, prefill_chunk=64, **ARMS["block-4"])
    prompts = [[5, 9, 13, 17, 21, 25, 29, 33], [40, 3, 77, 12, 8, 61, 2, 19]]
    alone = measure(engine, [prompts[:1]], 12)
    assert alone["batch"] == alone["decode"]
    _, _, requests = engine.collect(prompts, 12)
    last = max(requests, key=lambda r: r.done_ns)
    assert decode_span(requests) == last.done_ns - min(r.first_token_ns for r in requests)
    assert all(decode_span(requests) >= r.done_ns - r.first_token_ns > 0 for r in requests)
