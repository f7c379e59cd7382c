"""`runner`: the command line. One subcommand per verb; each verb lives in its own module
(exposing `add_arguments(parser)` and `main(args) -> int`) and is imported only when used."""

from __future__ import annotations

import argparse
import importlib
import sys

# verb -> (module, one-line help)
VERBS = {
    "run": ("runner.experiments.commands", "run a declared experiment into DuckDB"),
    "export": ("runner.experiments.exchange_commands", "export an experiment's rows to Parquet"),
    "import": ("runner.experiments.exchange_commands", "merge exported rows from another machine"),
    "fold": ("runner.experiments.fold_commands", "fold a cut-off run's cell folders into one"),
    "build": ("runner.publish.site.commands", "build the site (mkdocs build --strict)"),
    "audit": ("runner.publish.site.commands", "print every claim with its recomputed value"),
    "pin": ("runner.publish.site.pin", "pin a post's judged data to the measurement folders it reads"),
    "bench": ("runner.bench", "benchmark this engine against mlx-lm"),
    "demo": ("runner.demo", "generate a few continuations on a checkpoint"),
    "train": ("runner.train.commands", "train a shipped checkpoint (--preset tiny | deep)"),
    "train-tiny": ("runner.train.commands", "re-create the shipped tiny checkpoint"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for verb, (module, help_) in VERBS.items():
        p = sub.add_parser(verb, help=help_)
        if verb == chosen:  # import only the module the user asked for
            mod = importlib.import_module(module)
            name = f"add_{verb.replace('-', '_')}_arguments"
            (getattr(mod, name) if hasattr(mod, name) else mod.add_arguments)(p)
    args = parser.parse_args(argv)
    mod = importlib.import_module(VERBS[args.verb][0])
    handler = getattr(mod, f"main_{args.verb.replace('-', '_')}", None) or mod.main
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
