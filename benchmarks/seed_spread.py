"""Each claim's statistic across realisations of the tiny world (seeds), and its spread.

    python benchmarks/seed_spread.py RUN...                      # finished runs
    python benchmarks/seed_spread.py --seeds 0 1 2 --work DIR [--cores 2] [--configfile config.yaml]

A RUN is a tables directory (`results/tables`, `docs/results`), or a run directory holding
`results/tables`; `NAME=RUN` names its column (default: the directory's name, `seed-N` for the
runs this script made). With `--seeds` it first runs the study for each seed into `DIR/seed-N/`
(`snakemake --cores C --configfile F --config seed=N --directory DIR/seed-N`; a finished one is
left as it is), then reads them. The default study takes about 10 minutes of 2 cores per seed.

Prints one row per claim and subject (`claims.csv`, or computed from the tables where a run has
none, as `orthrus compare-runs` does): the statistic of each run, their minimum, maximum and
spread (max - min), and how many runs reach each verdict; exit 0 when every run reaches the same
verdict on every claim they share, 1 otherwise. `--markdown` prints the table as Markdown.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orthrus.report.claims import load_or_compute  # noqa: E402


def tables_dir(path: Path) -> Path:
    """A run's tables directory: `path` itself, or `path/results/tables`."""
    for p in (path, path / "results" / "tables"):
        if (p / "match_overall.csv").exists():
            return p
    raise SystemExit(f"seed_spread: {path} holds no tables (no match_overall.csv there or in results/tables)")


def parse_run(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = "", spec
    p = Path(path)
    return name or (
        p.name if p.name not in ("tables", "results") else p.resolve().parents[1 if p.name == "tables" else 0].name
    ), p


def run_seeds(seeds, work: Path, cores: int, configfile: Path) -> list[tuple[str, Path]]:
    """Run the study once per seed, each in its own directory."""
    runs = []
    for seed in seeds:
        d = work / f"seed-{seed}"
        d.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(d),
            "--cores",
            str(cores),
            "--configfile",
            str(configfile.resolve()),
            "--config",
            f"seed={seed}",
        ]
        print(f"[seed_spread] seed {seed}: {' '.join(cmd)}", file=sys.stderr)
        subprocess.run(cmd, check=True)
        runs.append((f"seed-{seed}", d))
    return runs


def spread(runs: list[tuple[str, Path]]) -> pd.DataFrame:
    """One row per claim and subject: each run's statistic, min, max, spread, verdict counts."""
    frames = []
    for name, path in runs:
        df, _ = load_or_compute(tables_dir(path))
        frames.append(df.assign(run=name)[["claim", "subject", "statistic_name", "statistic", "verdict", "run"]])
    long = pd.concat(frames, ignore_index=True)
    keys = ["claim", "subject"]
    order = list(dict.fromkeys(map(tuple, long[keys].values)))
    stat = long.pivot_table(index=keys, columns="run", values="statistic", aggfunc="first", dropna=False)
    stat = stat.reindex(index=pd.MultiIndex.from_tuples(order, names=keys), columns=[n for n, _ in runs])
    out = stat.copy()
    out.insert(0, "statistic_name", long.groupby(keys)["statistic_name"].first().reindex(out.index).fillna(""))
    out["min"], out["max"] = stat.min(axis=1), stat.max(axis=1)
    out["spread"] = out["max"] - out["min"]
    verdicts = long.groupby(keys)["verdict"].apply(
        lambda v: ", ".join(f"{k} {n}/{len(v)}" for k, n in v.value_counts().items())
    )
    out["verdicts"] = verdicts.reindex(out.index)
    out["agree"] = long.groupby(keys)["verdict"].nunique().reindex(out.index) == 1
    return out.reset_index()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", metavar="RUN", help="[NAME=]a tables directory or a run directory")
    ap.add_argument("--seeds", nargs="*", type=int, default=[], help="run the study for these seeds first")
    ap.add_argument("--work", type=Path, default=Path("seed-runs"), help="where the --seeds runs go")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--configfile", type=Path, default=ROOT / "config.yaml")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    runs = [parse_run(r) for r in args.runs]
    runs += run_seeds(args.seeds, args.work, args.cores, args.configfile) if args.seeds else []
    if not runs:
        ap.error("give finished runs, or --seeds to run")
    names = [n for n, _ in runs]
    if len(set(names)) != len(names):
        ap.error(f"two runs share a name ({', '.join(names)}): name them NAME=PATH")
    table = spread(runs)
    with pd.option_context(
        "display.width",
        250,
        "display.max_columns",
        None,
        "display.max_colwidth",
        60,
        "display.float_format",
        "{:.3g}".format,
    ):
        print(table.to_markdown(index=False, floatfmt=".3g") if args.markdown else table.to_string(index=False))
    n_diff = int((~table["agree"]).sum())
    print(f"{len(runs)} runs, {len(table)} claims, {n_diff} with differing verdicts")
    return 0 if n_diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
