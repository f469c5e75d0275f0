"""`orthrus compare-envs`: one study's runs under several numerical environments, side by side.

    orthrus compare-envs --run KIND:THREADS=TABLES_DIR [--run ...] [--claims KIND:THREADS=CLAIMS.csv ...]
                         [--probe KIND:THREADS=PROBE.json ...] [--common]
                         --out-dir results/tables [--figure results/figures/match_by_env]

Each `--run` is the tables directory of the same study run under one environment (`orthrus --cpu-kind
KIND`, THREADS torch threads; docs/MACHINES.md); its claims are the `--claims` file given for it, else
its `claims.csv`, else computed from its tables (--claims lets --out-dir be one environment's own
tables directory without reading back the claims.csv that this command's tables feed). Each `--probe`
is `orthrus --cpu-kind KIND machine-probe --threads THREADS`'s record there.
Writes to --out-dir:

- `verdicts_by_env.csv`: per claim and subject, its verdict under every environment (a column each,
  named KIND-tTHREADS, in the order given: the first is the planted control's baseline) and `agree`;
- `match_by_env.csv`: every environment's match_overall.csv rows (each decoding cell's match rate
  and its Wilson interval, as `orthrus analyze` wrote them) with the environment's kind and threads;
- `machine_probes.csv` (with --probe): per environment, what ATen, oneDNN and oneMKL ran, and the
  bytes of fixed products;

and the figure of match_by_env.csv (PNG and PDF) with --figure. `orthrus claims` on --out-dir then
states `verdicts-machine-invariant` and its planted control (orthrus/report/claims/machine.py).
Exit status 0; 1 with --strict when a verdict differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from orthrus.errors import InputError
from orthrus.io import save_figure, write_table
from orthrus.plotting import pyplot
from orthrus.report.claims import load_or_compute, read_claims
from orthrus.report.claims.machine import (
    MACHINE_PROBES,
    MATCH_BY_ENV,
    VERDICTS_BY_ENV,
    control_row,
    differing,
    env_name,
    invariance_row,
    verdict_table,
)
from orthrus.report.figures.base import _errbar, _legend

CELL = ["model", "decoder", "precision", "attention"]
MATCH_COLUMNS = ["env", "kind", "threads", *CELL, "n", "match_rate", "ci_low", "ci_high"]
PROBE_FIELDS = ["aten_cpu_capability", "onednn_isa", "onednn_bf16_matmul", "mkl_code_path", "num_threads"]


def parse_env(spec: str, flag: str) -> tuple[str, int, Path]:
    """`KIND:THREADS=PATH` -> (kind, threads, path), or InputError naming the flag."""
    head, sep, path = spec.partition("=")
    kind, colon, threads = head.partition(":")
    if not (sep and colon and kind and path and threads.isdigit() and int(threads) >= 1):
        raise InputError(f"{flag} {spec!r}: expected KIND:THREADS=PATH, e.g. avx2:1=results/tables")
    return kind, int(threads), Path(path)


def match_by_env(runs: dict[str, tuple[str, int, Path]]) -> pd.DataFrame:
    parts = []
    for env, (kind, threads, tables) in runs.items():
        path = tables / "match_overall.csv"
        if not path.exists():
            raise InputError(f"{path} does not exist (environment {env}: run `orthrus analyze` there)")
        df = pd.read_csv(path, dtype={c: str for c in CELL})
        missing = [c for c in MATCH_COLUMNS[3:] if c not in df.columns]
        if missing:
            raise InputError(f"{path} lacks column(s) {', '.join(missing)}")
        parts.append(df[MATCH_COLUMNS[3:]].assign(env=env, kind=kind, threads=threads))
    return pd.concat(parts, ignore_index=True)[MATCH_COLUMNS]


def probes_table(probes: dict[str, tuple[str, int, Path]]) -> pd.DataFrame:
    rows = []
    for env, (kind, threads, path) in probes.items():
        try:
            rec = json.loads(path.read_text())
            digests = rec["digests"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"--probe {path}: not an `orthrus machine-probe` record ({e!r})") from None
        if rec.get("num_threads") != threads:
            raise InputError(f"--probe {path}: ran {rec.get('num_threads')} threads, not {threads} as its name says")
        rows.append({"env": env, "kind": kind, "threads": threads, **{f: rec.get(f) for f in PROBE_FIELDS}, **digests})
    return pd.DataFrame(rows)


def fig_match_by_env(df: pd.DataFrame):
    """Each decoding cell's match rate under every environment, with its Wilson 95% interval."""
    plt = pyplot()
    cells = df[CELL].astype(str).agg("/".join, axis=1)
    labels = list(dict.fromkeys(cells))
    envs = list(dict.fromkeys(df["env"]))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.4 * len(labels) * max(1, len(envs)) ** 0.5 + 4), 5.2))
    width = 0.8 / max(1, len(envs))
    for i, env in enumerate(envs):
        s = df[df["env"] == env]
        x = [labels.index(c) - 0.4 + width * (i + 0.5) for c in cells[s.index]]
        err = _errbar(s["match_rate"], s["ci_low"], s["ci_high"])
        ax.errorbar(x, s["match_rate"], yerr=err, fmt="o", capsize=2, markersize=4, label=env)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("match rate with the AR reference\n(Wilson 95% CI)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Each decoding cell under every environment (CPU kind, threads)", fontsize=10)
    _legend(ax, len(envs))
    fig.tight_layout()
    return fig


def _envs(specs: list[str], flag: str) -> dict[str, tuple[str, int, Path]]:
    out = {}
    for spec in specs:
        kind, threads, path = parse_env(spec, flag)
        name = env_name(kind, threads)
        if name in out:
            raise InputError(f"{flag}: environment {name} given twice")
        out[name] = (kind, threads, path)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus compare-envs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", required=True, help="KIND:THREADS=TABLES_DIR, one per environment")
    ap.add_argument("--claims", action="append", default=[], help="KIND:THREADS=CLAIMS.csv (orthrus claims --out)")
    ap.add_argument("--probe", action="append", default=[], help="KIND:THREADS=PROBE.json (orthrus machine-probe)")
    ap.add_argument("--common", action="store_true", help="only the claims and subjects every environment states")
    ap.add_argument("--out-dir", required=True, help="where the tables go (the study's tables directory)")
    ap.add_argument("--figure", help="the figure's path without suffix (PNG and PDF)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a verdict differs between environments")
    args = ap.parse_args(argv)
    runs, probes, given = _envs(args.run, "--run"), _envs(args.probe, "--probe"), _envs(args.claims, "--claims")
    if len(runs) < 2:
        raise InputError(f"--run: {len(runs)} environment given; a comparison needs two or more")
    for env, (_, _, tables) in runs.items():
        if not tables.is_dir():
            raise InputError(f"--run {env}: {tables} is not a tables directory")
    if probes and set(probes) != set(runs):
        raise InputError(f"--probe: environments {sorted(probes)} are not --run's {sorted(runs)}")
    if set(given) - set(runs):
        raise InputError(f"--claims: environment(s) {sorted(set(given) - set(runs))} have no --run")
    claims = {e: read_claims(given[e][2]) if e in given else load_or_compute(t)[0] for e, (_, _, t) in runs.items()}
    table = verdict_table(claims, args.common)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_table(table, out / VERDICTS_BY_ENV)
    match = match_by_env(runs)
    write_table(match, out / MATCH_BY_ENV)
    probe_df = probes_table({e: probes[e] for e in runs if e in probes}) if probes else None
    if probe_df is not None:
        write_table(probe_df, out / MACHINE_PROBES)
    if args.figure:
        save_figure(fig_match_by_env(match), args.figure)
    rows = [invariance_row(table), control_row(table, probe_df)]
    for r in rows:
        sys.stdout.write(f"{r['claim']}: {r['verdict']} ({r['reason']})\n")
    return 1 if args.strict and differing(table) else 0


if __name__ == "__main__":
    sys.exit(main())
