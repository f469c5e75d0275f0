"""Tokens per forward by domain (Table 2)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orthrus.plotting import pyplot
from orthrus.report.figures.base import _empty, _legend


def fig_tpf_by_domain(tpf: pd.DataFrame):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.2), squeeze=False)
    cols = [
        ("tpf_verify", "tokens / (prefill + verify)"),
        ("tpf_all", "tokens / (prefill + diffusion + verify)"),
        ("tpf_authors", "(1 + accepted) / (1 + verify), the follow-up paper's"),
    ]
    for ax, (col, ylabel) in zip(axes[0], cols):
        ax.set_title(f"Tokens per forward: {ylabel}")
        d = tpf.dropna(subset=[col]) if len(tpf) else tpf
        if not len(d):
            _empty(ax, "no speculative decoding results" if col != "tpf_authors" else "no Orthrus decoding results")
            continue
        domains = sorted(x for x in d["domain"].unique() if x != "all")
        domains += ["all"] if "all" in set(d["domain"]) else []
        x = np.arange(len(domains))
        run = [c for c in ("message", "max_new_tokens") if c in d.columns]
        keys = (
            ["decoder", "model", "precision", "attention"]
            if "decoder" in d.columns
            else ["model", "precision", "attention"]
        )
        series = list(d.groupby([*keys, *run], sort=True, dropna=False))
        width = 0.5 / max(1, len(series))
        for i, (key, s) in enumerate(series):
            s = s.set_index("domain").reindex(domains)
            off = (i - (len(series) - 1) / 2) * width
            ax.errorbar(
                x + off,
                s[col],
                yerr=s[f"{col}_ci"].fillna(0).to_numpy(float),
                fmt="o",
                capsize=3,
                label=" ".join(str(k) for k in key if not pd.isna(k)),
            )
        ax.set_xticks(x, domains, rotation=45, ha="right")
        ax.set_ylabel(f"{col} (95% t CI)")
        _legend(ax, len(series))
    fig.tight_layout()
    return fig
