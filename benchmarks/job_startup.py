"""What a job's imports cost with the garbage collector running: one `orthrus` command run as the
study's jobs run it (`python -m orthrus`, which imports the command with the collector paused and
then freezes what the import made, `orthrus.cli._import`) against the same command through
`orthrus.cli.main` in a fresh process (the in-process path: no pause, no freeze), interleaved.

    python benchmarks/job_startup.py [--reps 5] [--prompts results/prompts/eval.parquet] [-- ARGS...]

By default the command is a short decoding job: the shipped teacher's reference (ar-ref, bf16 sdpa)
on the first prompt of each domain. Prints each one's median wall seconds and their ratio (the
in-process path's over the job's; above 1 means the pause pays). Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IN_PROCESS = "import sys; from orthrus.cli import main; sys.exit(main(sys.argv[1:]))"


def default_command(prompts: str, out: Path) -> list[str]:
    options = '{"decoder": "ar-ref", "precision": "bf16", "attention": "sdpa", "max_new_tokens": 128}'
    teacher = ROOT / "orthrus" / "world" / "subject" / "teacher"
    return [
        "decode", "--model-path", str(teacher), "--model-name", "teacher", "--prompts", prompts,
        "--options", options, "--prompts-per-domain", "1", "--out", str(out),
    ]  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts", default="results/prompts/eval.parquet", help="for the default command")
    ap.add_argument("command", nargs="*", help="an orthrus command and its arguments (after --)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        command = args.command or default_command(args.prompts, Path(tmp) / "out.parquet")
        runs = {
            "job (python -m orthrus)": [sys.executable, "-m", "orthrus", *command],
            "in-process path": [sys.executable, "-c", IN_PROCESS, *command],
        }
        times = {k: [] for k in runs}
        for _ in range(args.reps):
            for k, cmd in runs.items():
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:26s} median {v:7.2f} s over {args.reps} runs")
    job, plain = med.values()
    print(f"in-process path / job: {plain / job:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
