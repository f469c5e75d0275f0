"""`orthrus <command> ...`: one entry point; each command lives in the module that does the work."""

from __future__ import annotations

import gc
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
    "sampling": "orthrus.audit.sampling_cli",
    "rehearsal-standins": "orthrus.rehearsal.standins",
    "check-config": "orthrus.plan.study_config",
    "power": "orthrus.power",
    "zoo": "orthrus.zoo.cli",
}


def main(argv: list[str] | None = None, *, job: bool = False) -> int:
    """Run one command in this process. `job`: this process is the command's own (the console
    script, `python -m orthrus`), so its imports may pause the garbage collector (`_import`)."""
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

    module = _import(COMMANDS[argv[0]], job)
    try:
        return module.main(argv[1:]) or 0
    except InputError as e:
        sys.stderr.write(f"orthrus {argv[0]}: {e}\n")
        return 2


def _import(name: str, job: bool):
    """The command's module. Its imports (torch, pandas) leave hundreds of thousands of long-lived
    objects (380,000 for `orthrus decode`), which the cyclic garbage collector walks again and again
    while they load, and later in the job's own full collections: a job imports with it paused,
    then freezes what the import made (gc.freeze: collections skip those objects from then on).
    About 1.5 s of a decoding job's start-up, no token changed (docs/SPEED.md); not in-process
    (tests), where a freeze would keep the caller's garbage."""
    if not job:
        return importlib.import_module(name)
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()


def script() -> int:
    """The `orthrus` console script: a job's whole process."""
    return main(job=True)


if __name__ == "__main__":
    sys.exit(script())
