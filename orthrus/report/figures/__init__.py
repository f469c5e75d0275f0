"""`orthrus figures`: the study's figures from the tables `orthrus analyze` wrote.

    orthrus figures --tables results/tables --out-dir results/figures

Always writes exactly `figure_files(out_dir)`: every name in FIGURES as PNG and PDF. A figure
whose data are empty (no divergences at all in fp32, no perplexities, no forensics) is an
annotated empty panel, never a crash or a missing file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from orthrus.contracts import FIGURE_FORMATS as FORMATS
from orthrus.contracts import FIGURES
from orthrus.io import save_figure
from orthrus.plotting import pyplot
from orthrus.report.figures.base import FigureError, _need, _read_table
from orthrus.report.figures.benchmarks import fig_benchmarks
from orthrus.report.figures.exactness import (
    fig_decoders,
    fig_first_divergence_hist,
    fig_match_by_domain,
    fig_pairwise_match,
    fig_survival,
    survival_curve,
)
from orthrus.report.figures.explain import fig_margin_at_divergence, fig_match_vs_ppl, fig_match_vs_uncertainty
from orthrus.report.figures.load import fig_load
from orthrus.report.figures.tpf import fig_tpf_by_domain

__all__ = [
    "FIGURES",
    "FigureError",
    "fig_benchmarks",
    "fig_decoders",
    "fig_first_divergence_hist",
    "fig_load",
    "fig_margin_at_divergence",
    "fig_match_by_domain",
    "fig_match_vs_ppl",
    "fig_match_vs_uncertainty",
    "fig_pairwise_match",
    "fig_survival",
    "fig_tpf_by_domain",
    "figure_files",
    "make_figures",
    "main",
    "survival_curve",
]


def figure_files(out_dir) -> list[Path]:
    out_dir = Path(out_dir)
    return [out_dir / f"{name}.{fmt}" for name in FIGURES for fmt in FORMATS]


_KEYS = ("model", "decoder", "precision", "attention")
# Each table the figures read: its file, whether the figures need it, the columns they use.
_TABLES = {
    "traj": ("trajectories.parquet", True, (*_KEYS, "match", "first_divergence", "n_tokens", "ref_n_tokens", "ppl")),
    "mbd": ("match_by_domain.csv", True, (*_KEYS, "domain", "match_rate", "ci_low", "ci_high")),
    "tpf": (
        "tpf_by_domain.csv",
        True,
        ("model", "precision", "attention", "domain")
        + tuple(f"tpf_{k}{ci}" for k in ("verify", "all", "authors") for ci in ("", "_ci")),
    ),
    "pw": ("pairwise_match.csv", True, (*(f"{s}_{k}" for s in "ab" for k in _KEYS), "match_rate")),
    "dec": ("decoders.csv", True, (*_KEYS, "match_rate", "ci_low", "ci_high")),
    "fx": ("forensics_rows.parquet", False, (*_KEYS, "margin_native")),
    "unc": (
        "uncertainty_by_domain.csv",
        False,
        ("domain", "near_ties_per_prompt", "near_tie_threshold", "scored_precision"),
    ),
    "fsum": ("forensics.csv", False, ()),
    "load": (
        "load.csv",
        False,
        ("model", "server", "method", "precision", "planted", "concurrency", "match_rate", "distinct_mean"),
    ),
}


def _tables(tables_dir: Path) -> dict:
    """The tables the figures read, each checked for the columns they need (None: optional and absent)."""
    out = {}
    for key, (name, required, columns) in _TABLES.items():
        out[key] = _read_table(tables_dir, name, required)
        if out[key] is not None:
            _need(out[key], list(columns), name)
    traj, fx, fsum = out["traj"], out["fx"], out.pop("fsum")
    traj["match"] = traj["match"].astype(bool)
    traj["ppl"] = pd.to_numeric(traj["ppl"], errors="coerce")
    if fx is not None:
        fx["margin_native"] = pd.to_numeric(fx["margin_native"], errors="coerce")
    near_tie = None
    if fsum is not None and "near_tie_threshold" in fsum.columns and len(fsum):
        near_tie = float(fsum["near_tie_threshold"].iloc[0])
    out["near_tie"] = near_tie
    return out


def make_figures(tables_dir, out_dir) -> list[Path]:
    plt = pyplot()
    tables_dir, out_dir = Path(tables_dir), Path(out_dir)
    t = _tables(tables_dir)
    traj, mbd, tpf, pw, dec, fx, unc, near_tie = (
        t[k] for k in ("traj", "mbd", "tpf", "pw", "dec", "fx", "unc", "near_tie")
    )

    builders = {
        "match_by_domain": lambda: fig_match_by_domain(mbd),
        "match_vs_ppl": lambda: fig_match_vs_ppl(traj, _read_table(tables_dir, "ppl_logit.csv", True)),
        "survival": lambda: fig_survival(traj),
        "first_divergence_hist": lambda: fig_first_divergence_hist(traj),
        "tpf_by_domain": lambda: fig_tpf_by_domain(tpf),
        "margin_at_divergence": lambda: fig_margin_at_divergence(fx, near_tie),
        "pairwise_match": lambda: fig_pairwise_match(pw),
        "match_vs_uncertainty": lambda: fig_match_vs_uncertainty(mbd, unc),
        "decoders": lambda: fig_decoders(dec),
        "load": lambda: fig_load(t["load"]),
    }
    assert list(builders) == list(FIGURES)
    written = []
    for name in FIGURES:
        fig = builders[name]()
        written += save_figure(fig, out_dir / name)
        plt.close(fig)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", required=True, help="directory written by `orthrus analyze`")
    ap.add_argument("--out-dir", required=True, help="directory for the figures (PNG and PDF)")
    ap.add_argument("--list", action="store_true", help="print the files that would be written and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(map(str, figure_files(args.out_dir))))
        return 0
    written = make_figures(args.tables, args.out_dir)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
