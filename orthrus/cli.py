"""`orthrus <command> ...`: one entry point; each command lives in the module that does the work."""
from __future__ import annotations

import importlib
import sys

# command -> module with a `main(argv)` function. Imported lazily so `orthrus --help` is fast.
COMMANDS = {
    "train-teacher": "orthrus.world.teacher",
    "subject": "orthrus.world.subject",
    "prompts": "orthrus.prompts",
    "corpus": "orthrus.corpus",
    "train": "orthrus.distill.loop",
    "decode": "orthrus.trajectories",
    "export-prompts": "orthrus.export_prompts",
    "ingest": "orthrus.external",
    "engine-standin": "orthrus.standin",
    "gather": "orthrus.io",
    "analyze": "orthrus.analysis",
    "perplexity": "orthrus.perplexity",
    "forensics": "orthrus.forensics",
    "figures": "orthrus.figures",
    "lm-eval": "orthrus.lmeval",
    "summary": "orthrus.summary",
    "claims": "orthrus.claims",
    "compare-tables": "orthrus.compare",
    "compare-runs": "orthrus.compare_runs",
    "replay": "orthrus.replay",
    "frontier": "orthrus.frontier",
    "rehearsal-standins": "orthrus.rehearsal",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        known = "\n  ".join(COMMANDS)
        msg = f"usage: orthrus <command> [options]\n\ncommands:\n  {known}\n"
        if argv and argv[0] not in ("-h", "--help"):
            sys.stderr.write(f"orthrus: unknown command {argv[0]!r}\n{msg}")
            return 2
        sys.stdout.write(msg)
        return 0
    from orthrus.io import InputError

    module = importlib.import_module(COMMANDS[argv[0]])
    try:
        return module.main(argv[1:]) or 0
    except InputError as e:
        sys.stderr.write(f"orthrus {argv[0]}: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
