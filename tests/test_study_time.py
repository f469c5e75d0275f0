"""benchmarks/study_time.py: the wall-time span and per-stage table from the jobs' timing files (Snakemake's `benchmark:`)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("study_time", ROOT / "benchmarks" / "study_time.py")
study_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study_time)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path: Path, seconds: float, rss: float, end: float, cpu: float = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n")
    os.utime(path, (end, end))


def test_wall_time_is_the_span_of_parallel_jobs(tmp_path, capsys):
    t0 = 1_000_000.0
    _bench(tmp_path / "train_teacher.tsv", 100, 700, t0 + 100)  # 0 .. 100
    _bench(tmp_path / "decode/a/1-of-1.tsv", 50, 900, t0 + 150)  # 100 .. 150
    _bench(tmp_path / "decode/b/1-of-1.tsv", 40, 800, t0 + 140)  # 100 .. 140, in parallel
    jobs = study_time.read_timings(tmp_path)
    table, wall = study_time.summarize(jobs)
    assert wall == 150 and list(table.index) == ["train_teacher", "decode"]
    assert table.loc["decode", "jobs"] == 2 and table.loc["decode", "sum_s"] == 90
    assert table.loc["decode", "peak_rss_mb"] == 900
    assert study_time.main(["--timing", str(tmp_path), "--budget", "120", "--out", str(tmp_path / "t.csv")]) == 0
    assert "ratio 1.25 (OVER budget)" in capsys.readouterr().out
    import pandas as pd

    written = pd.read_csv(tmp_path / "t.csv", index_col="stage")  # what docs render a run's times from
    assert list(written.index) == ["train_teacher", "decode", "all"]
    assert written.loc["all", "longest_s"] == 150 and written.loc["all", "sum_s"] == 190


def test_critical_path_and_idle_cores(tmp_path, capsys):
    """teacher (0-100) -> decode a (105-150, after a 5 s gap); decode b (100-140) runs beside it:
    the chain that decides the wall time is teacher -> a; the cores were held 100 + 45 + 40 of
    2 x 150 core-seconds, whatever CPU time Snakemake's sampling read for the jobs."""
    t0 = 2_000_000.0
    _bench(tmp_path / "train_teacher.tsv", 100, 700, t0 + 100, cpu=74)
    _bench(tmp_path / "decode/a/1-of-1.tsv", 45, 900, t0 + 150, cpu=14)
    _bench(tmp_path / "decode/b/1-of-1.tsv", 40, 800, t0 + 140, cpu=14)
    jobs = study_time.read_timings(tmp_path)
    chain = study_time.critical_path(jobs, slack=0)
    assert [c["job"] for c in chain] == ["train_teacher.tsv", "decode/a/1-of-1.tsv"]
    assert chain[1]["gap_before_s"] == 5 and chain[0]["gap_before_s"] == 0
    assert abs(study_time.idle_share(jobs, 2) - (1 - 185 / 300)) < 1e-9
    assert study_time.main(["--timing", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "critical path (145 s of jobs, 5 s between them)" in out and "cores idle: 38% of 2 cores" in out


def test_the_critical_path_ends_where_short_jobs_end_within_the_slack_of_each_other():
    """Two short jobs, each ending within the 2 s slack of the other's start (as a fast machine's
    tiny world gives): each was the other's link before the chain had to move back in time, and the
    search never ended (the gpu_check fallback's hang in CI). A SIGALRM stops the test at 10 s."""
    import signal

    import pandas as pd

    jobs = pd.DataFrame(
        [
            {"job": "a", "seconds": 1.0, "start": 10.0, "end": 11.0},
            {"job": "b", "seconds": 1.0, "start": 10.5, "end": 11.5},
        ]
    )

    def stop(*_):
        raise TimeoutError("critical_path ran past 10 s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        chain = study_time.critical_path(jobs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [c["job"] for c in chain] == ["a", "b"]
