"""`runner bench`'s argument errors: one line and exit code 2, before anything is timed."""

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
    ],
)
def test_bad_bench_arguments_exit_2_with_one_line(argv, message, capsys):
    assert cli_main(["bench", "--no-openblas", *argv]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"runner bench: {message}"]
