"""The default study's wall time and memory, read from the jobs' timing files.

    python benchmarks/study_time.py [--timing results/timing] [--budget 600] [--cores 2] [--out CSV]

Every rule writes a timing file `results/timing/<stage>/...tsv` (Snakemake's `benchmark:`): the job's
seconds and peak resident memory. A file's modification time is when its job ended, so
`end - s` is when it started; the study's wall time is the span from the first start to the
last end (jobs run in parallel, so it is less than the sum). Prints one row per stage
(jobs, summed and longest job seconds, peak RSS) and the wall time against the budget
(target: the whole default study under 10 minutes on 2 cores, installation aside), then the
critical path (the chain of jobs that decides the wall time) and the share of the cores' time
no job used, so the next person knows where to look.

Run it right after a complete run from a clean `results/`: a stage rerun later moves the
span. `--out` writes the per-stage table with a last row `all` (the jobs, their summed seconds, the
wall time as its longest, the peak RSS) for docs to render a run's times from (docs/real-model).
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
        cpu = float(t["cpu_time"].iloc[0]) if "cpu_time" in t else float("nan")
        end = f.stat().st_mtime
        stage = f.relative_to(root).parts[0].removesuffix(".tsv")
        rows.append(
            {
                "stage": stage,
                "job": str(f.relative_to(root)),
                "seconds": s,
                "max_rss_mb": rss,
                "cpu_s": cpu,
                "start": end - s,
                "end": end,
            }
        )
    return pd.DataFrame(rows)


def summarize(jobs: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Per-stage table in start order, and the wall-time span of all jobs."""
    g = jobs.groupby("stage")
    table = pd.DataFrame(
        {
            "jobs": g.size(),
            "sum_s": g["seconds"].sum(),
            "longest_s": g["seconds"].max(),
            "peak_rss_mb": g["max_rss_mb"].max(),
            "first_start": g["start"].min(),
        }
    )
    table = table.sort_values("first_start").drop(columns="first_start")
    return table, float(jobs["end"].max() - jobs["start"].min())


def critical_path(jobs: pd.DataFrame, slack: float = 2.0) -> list[dict]:
    """The chain of jobs that decides the wall time: from the job that ended last, back through
    the job that ended latest before each one started (within `slack` seconds of its start:
    the scheduler's own delay), to one that started with the run. Each link with the gap
    before it (time nothing on the chain ran: jobs without a timing file, start-up, a wait
    for cores). Each link ends strictly before the one after it: two short jobs within `slack` of
    each other's start would otherwise each be the other's link, a chain without end."""
    chain, job = [], jobs.loc[jobs["end"].idxmax()]
    while True:
        before = jobs[(jobs["end"] <= job["start"] + slack) & (jobs["end"] < job["end"])]
        gap = float(job["start"] - (before["end"].max() if len(before) else jobs["start"].min()))
        chain.append({"job": job["job"], "seconds": float(job["seconds"]), "gap_before_s": max(gap, 0.0)})
        if before.empty:
            return chain[::-1]
        job = before.loc[before["end"].idxmax()]


def idle_share(jobs: pd.DataFrame, cores: int) -> float:
    """The share of the cores' time over the run's span that no timed job held: each job
    holds its core for its wall seconds. (Not the files' cpu_time: Snakemake samples it, so a job
    of under a minute reads as 14 or 44 CPU seconds whatever it ran.)"""
    wall = float(jobs["end"].max() - jobs["start"].min())
    return 1.0 - float(jobs["seconds"].sum()) / (cores * wall) if wall > 0 else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timing", default="results/timing", type=Path)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds (default: 10 minutes)")
    ap.add_argument("--cores", type=int, default=2, help="the cores the run had (for the idle share)")
    ap.add_argument("--out", type=Path, help="CSV of the per-stage table, with the whole run as stage `all`")
    args = ap.parse_args(argv)
    jobs = read_timings(args.timing)
    if jobs.empty:
        sys.exit(f"no timing files under {args.timing}: run `snakemake --cores 2` first")
    table, wall = summarize(jobs)
    print(table.round(1).to_string())
    if args.out:
        whole = {"jobs": len(jobs), "sum_s": jobs["seconds"].sum(), "longest_s": wall}
        out = pd.concat([table, pd.DataFrame([whole | {"peak_rss_mb": jobs["max_rss_mb"].max()}], index=["all"])])
        out.rename_axis("stage").round(1).to_csv(args.out)
    print(f"\n{len(jobs)} jobs, {jobs['seconds'].sum():.0f} s of job time, peak RSS {jobs['max_rss_mb'].max():.0f} MB")
    print(
        f"wall time {wall:.0f} s = {wall / 60:.1f} min; budget {args.budget:.0f} s: "
        f"ratio {wall / args.budget:.2f} ({'within' if wall <= args.budget else 'OVER'} budget)"
    )
    chain = critical_path(jobs)
    print(
        f"\ncritical path ({sum(c['seconds'] for c in chain):.0f} s of jobs, "
        f"{sum(c['gap_before_s'] for c in chain):.0f} s between them):"
    )
    for c in chain:
        print(f"  {c['job']:<60} {c['seconds']:7.1f} s  (gap before {c['gap_before_s']:.1f} s)")
    print(
        f"cores idle: {idle_share(jobs, args.cores):.0%} of {args.cores} cores x wall time "
        "(jobs without a timing file, e.g. gathers and tables, count as idle)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
