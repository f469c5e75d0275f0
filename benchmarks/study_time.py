"""The default study's wall time and memory, read from Snakemake's benchmark files.

    python benchmarks/study_time.py [--timing results/timing] [--budget 600]

Every rule writes `results/timing/<stage>/...tsv` (Snakemake's `benchmark:`): the job's
seconds and peak resident memory. A file's modification time is when its job ended, so
`end - s` is when it started; the study's wall time is the span from the first start to the
last end (jobs run in parallel, so it is less than the sum). Prints one row per stage
(jobs, summed and longest job seconds, peak RSS) and the wall time against the budget
(target: the whole default study under 10 minutes on 2 cores, installation aside).

Run it right after a complete run from a clean `results/`: a stage rerun later moves the
span.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def read_timings(root: Path) -> pd.DataFrame:
    rows = []
    for f in sorted(root.rglob("*.tsv")):
        t = pd.read_csv(f, sep="\t")
        if t.empty:
            continue
        s, rss = float(t["s"].iloc[0]), float(t["max_rss"].iloc[0]) if "max_rss" in t else float("nan")
        end = f.stat().st_mtime
        stage = f.relative_to(root).parts[0].removesuffix(".tsv")
        rows.append({"stage": stage, "job": str(f.relative_to(root)), "seconds": s, "max_rss_mb": rss,
                     "start": end - s, "end": end})
    return pd.DataFrame(rows)


def summarize(jobs: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Per-stage table in start order, and the wall-time span of all jobs."""
    g = jobs.groupby("stage")
    table = pd.DataFrame({"jobs": g.size(), "sum_s": g["seconds"].sum(), "longest_s": g["seconds"].max(),
                          "peak_rss_mb": g["max_rss_mb"].max(), "first_start": g["start"].min()})
    table = table.sort_values("first_start").drop(columns="first_start")
    return table, float(jobs["end"].max() - jobs["start"].min())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timing", default="results/timing", type=Path)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds (default: 10 minutes)")
    args = ap.parse_args(argv)
    jobs = read_timings(args.timing)
    if jobs.empty:
        sys.exit(f"no Snakemake benchmark files under {args.timing}: run `snakemake --cores 2` first")
    table, wall = summarize(jobs)
    print(table.round(1).to_string())
    print(f"\n{len(jobs)} jobs, {jobs['seconds'].sum():.0f} s of job time, peak RSS "
          f"{jobs['max_rss_mb'].max():.0f} MB")
    print(f"wall time {wall:.0f} s = {wall / 60:.1f} min; budget {args.budget:.0f} s: "
          f"ratio {wall / args.budget:.2f} ({'within' if wall <= args.budget else 'OVER'} budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
