"""`orthrus [--cpu-kind KIND] <command> ...`: one entry point; each command lives in the module that
does the work. `--cpu-kind` caps the instruction sets of the libraries that compute the products
(orthrus/machine.py) before the command's module loads torch; a kind the CPU cannot do is refused."""

from __future__ import annotations

import gc
import importlib
import sys

from orthrus.errors import InputError
from orthrus.machine import KINDS, apply_kind

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
    "compare-envs": "orthrus.report.compare_envs",
    "replay": "orthrus.audit.replay",
    "frontier": "orthrus.decode.frontier",
    "sampling": "orthrus.audit.sampling_cli",
    "rehearsal-standins": "orthrus.rehearsal.standins",
    "check-config": "orthrus.plan.study_config",
    "power": "orthrus.power",
    "zoo": "orthrus.zoo.cli",
    "machine-probe": "orthrus.machine",
}


def main(argv: list[str] | None = None, *, job: bool = False) -> int:
    """Run one command in this process. `job`: this process is the command's own (the console
    script, `python -m orthrus`), so its imports may pause the garbage collector (`_import`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = _cpu_kind(argv)
    except InputError as e:
        sys.stderr.write(f"orthrus: {e}\n")
        return 2
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        known = "\n  ".join(COMMANDS)
        msg = (
            "usage: orthrus [--cpu-kind KIND] <command> [options]\n\n"
            f"--cpu-kind: one of {', '.join(KINDS)} (docs/MACHINES.md)\n\ncommands:\n  {known}\n"
        )
        if argv and argv[0] not in ("-h", "--help"):
            sys.stderr.write(f"orthrus: unknown command {argv[0]!r}\n{msg}")
            return 2
        sys.stdout.write(msg)
        return 0
    module = _import(COMMANDS[argv[0]], job)
    try:
        return module.main(argv[1:]) or 0
    except InputError as e:
        sys.stderr.write(f"orthrus {argv[0]}: {e}\n")
        return 2


def _cpu_kind(argv: list[str]) -> list[str]:
    """`argv` without a leading `--cpu-kind KIND` (or `--cpu-kind=KIND`), whose kind is applied to
    this process's environment here, before any command module imports torch."""
    if not argv or not argv[0].startswith("--cpu-kind"):
        return argv
    if "=" in argv[0]:
        kind, rest = argv[0].split("=", 1)[1], argv[1:]
    elif argv[0] == "--cpu-kind" and len(argv) > 1:
        kind, rest = argv[1], argv[2:]
    else:
        raise InputError(f"{argv[0]!r}: expected --cpu-kind KIND, one of {', '.join(KINDS)}")
    apply_kind(kind)
    return rest


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
