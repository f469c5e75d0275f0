"""`orthrus <command> ...`: one entry point; each command lives in the module that does the work."""

from __future__ import annotations

import importlib
import sys

# command -> module with a `main(argv)` function. Imported lazily so `orthrus --help` is fast.
COMMANDS = {
    "train-teacher": "orthrus.world.teacher",
    "convert-gguf": "orthrus.models.gguf",
    "subject": "orthrus.world.subject",
    "prompts": "orthrus.data.prompts",
    "corpus": "orthrus.data.corpus",
    "train": "orthrus.distill.train",
    "decode": "orthrus.decode.stage",
    "export-prompts": "orthrus.engines.export_prompts",
    "ingest": "orthrus.engines.ingest",
    "engine-samples": "orthrus.engines.engine_samples",
    "engine-run": "orthrus.engines.runner",
    "gguf-export": "orthrus.engines.gguf_export",
    "gather": "orthrus.data.gather",
    "analyze": "orthrus.analysis",
    "perplexity": "orthrus.analysis.perplexity",
    "forensics": "orthrus.audit.forensics",
    "figures": "orthrus.report.figures",
    "lm-eval": "orthrus.lmeval",
    "summary": "orthrus.report.summary",
    "claims": "orthrus.report.claims",
    "compare-tables": "orthrus.report.compare_tables",
    "compare-runs": "orthrus.report.compare_runs",
    "replay": "orthrus.audit.replay",
    "frontier": "orthrus.decode.frontier",
    "sampling": "orthrus.audit.sampling",
    "rehearsal-standins": "orthrus.rehearsal.standins",
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
