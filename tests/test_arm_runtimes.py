"""Arms' engines start before the group of cells they are in, so a round's cells run back
to back: no arm's load and warm-up sits between two cells whose ratio makes that round."""

from __future__ import annotations

from test_run_memory import DECLARATION

from runner.experiments.declaration import load
from runner.experiments.execute import run_experiment
from runner.experiments.progress import Progress
from runner.train.random_init import write_random_checkpoint


class Sequence(Progress):
    """What happened, in order: ("load", arm) and ("cell", arm, concurrency, round)."""

    def __init__(self):
        super().__init__(mode="plain")
        self.events: list[tuple] = []

    def note(self, text: str, **fields) -> None:
        super().note(text, **fields)
        if text.startswith("loading and warming up"):
            self.events.append(("load", text.rsplit(" ", 1)[1]))

    def cell_started(self, cell, target) -> None:
        super().cell_started(cell, target)
        self.events.append(("cell", cell.arm, cell.concurrency, cell.round))


def _run(tmp_path, design: str, extra: str = "", keep=None):
    """The shared declaration on a random checkpoint, its `rounds = 6` line replaced by
    `design` and `extra` appended, run into a fresh database: (summary, progress)."""
    model = write_random_checkpoint(tmp_path / "model", seed=1)
    decl = tmp_path / "arms.toml"
    decl.write_text(DECLARATION.format(model=model).replace("rounds = 6", design) + extra)
    progress = Sequence()
    return run_experiment(load(decl), tmp_path / "runs.duckdb", progress, keep=keep), progress


def test_every_arm_of_a_group_is_up_before_its_first_cell(tmp_path):
    summary, progress = _run(tmp_path, "rounds = 2")
    assert summary.completed == 8
    loads = [e[1] for e in progress.events if e[0] == "load"]
    assert sorted(loads) == ["off", "on"]  # each once: an engine lives until its arm's last cell
    # Both loads come before the first cell; then nothing but cells, round by round.
    assert [e[0] for e in progress.events] == ["load", "load"] + ["cell"] * 8
    cells = [e[1:] for e in progress.events if e[0] == "cell"]
    assert cells[:2] == [("off", 1, 0), ("on", 1, 0)]


def test_a_later_group_starts_the_arm_it_adds_before_its_first_cell(tmp_path):
    """A group whose arms were not all in the first one (a look measuring more arms, or an
    arm restarted) starts them before its first cell, not between its cells."""
    only = {("off", 1), ("on", 1), ("off", 2), ("also", 2)}
    summary, progress = _run(
        tmp_path,
        "rounds = 1",
        "\n[arms.also]\nmtp = true\ndraft_tokens = 2\n",
        keep=lambda c: (c.arm, c.concurrency) in only,
    )
    assert summary.completed == 4
    kinds = [e[0] for e in progress.events]
    # off and on up, two cells at concurrency 1; on's engine stops after its last cell; also
    # starts before the group at concurrency 2 begins, not between its two cells.
    assert kinds == ["load", "load", "cell", "cell", "load", "cell", "cell"]
    assert progress.events[4] == ("load", "also")


def test_restart_every_starts_every_arm_afresh_at_each_block_of_rounds(tmp_path):
    """`restart_every = 2` over five rounds: each arm on three instances (rounds 0-1, 2-3,
    4), each started before its block's first group, never between a group's cells."""
    summary, progress = _run(tmp_path, "rounds = 5\nrestart_every = 2")
    assert summary.completed == 20
    kinds = [e[0] for e in progress.events]
    block = ["load", "load"] + ["cell"] * 8  # two rounds at concurrency 1 and 2, both arms
    assert kinds == block + block + ["load", "load"] + ["cell"] * 4
    starts = [i for i, e in enumerate(progress.events) if e[0] == "load"]
    assert [progress.events[i + 2][3] for i in starts[::2]] == [0, 2, 4]  # the round each block starts
