"""benchmarks/study_time.py: the wall-time span and per-stage table from Snakemake benchmark files."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("study_time", ROOT / "benchmarks" / "study_time.py")
study_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study_time)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path: Path, seconds: float, rss: float, end: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t0\n")
    os.utime(path, (end, end))


def test_wall_time_is_the_span_of_parallel_jobs(tmp_path, capsys):
    t0 = 1_000_000.0
    _bench(tmp_path / "train_teacher.tsv", 100, 700, t0 + 100)            # 0 .. 100
    _bench(tmp_path / "decode/a/1-of-1.tsv", 50, 900, t0 + 150)           # 100 .. 150
    _bench(tmp_path / "decode/b/1-of-1.tsv", 40, 800, t0 + 140)           # 100 .. 140, in parallel
    jobs = study_time.read_timings(tmp_path)
    table, wall = study_time.summarize(jobs)
    assert wall == 150 and list(table.index) == ["train_teacher", "decode"]
    assert table.loc["decode", "jobs"] == 2 and table.loc["decode", "sum_s"] == 90
    assert table.loc["decode", "peak_rss_mb"] == 900
    assert study_time.main(["--timing", str(tmp_path), "--budget", "120"]) == 0
    assert "ratio 1.25 (OVER budget)" in capsys.readouterr().out
