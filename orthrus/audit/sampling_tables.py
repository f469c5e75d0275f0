"""The sampling audit's tables (`orthrus sampling table`, orthrus/audit/sampling.py): per cell the
summary of its trajectories' per-position TVs, per (loop, prompt) the two-sample test with Holm's
rejections, and the figure of both loops' TVs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orthrus.audit.distributions import CELL, tv_summary
from orthrus.audit.two_sample import holm
from orthrus.contracts import ERRORS, SAMPLING_TV_COLUMNS, TWO_SAMPLE_COLUMNS
from orthrus.decoders import DIFFUSION_DECODER, PLANTED


def tv_table(rows: pd.DataFrame, length: int) -> pd.DataFrame:
    """One row per cell: tv_summary of its trajectories' per-position TVs."""
    out = []
    for key, g in rows.groupby(CELL, sort=False):
        out.append(
            dict(zip(CELL, key))
            | {"length": length}
            | tv_summary([np.asarray(t, dtype=np.float64) for t in g["tv"]], length)
        )
    df = pd.DataFrame(out, columns=SAMPLING_TV_COLUMNS)
    df[ERRORS] = 0  # every trajectory is a row: the measurement has no error rows to leave out
    return df


def two_sample_table(rows: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """One row per (loop, prompt): each test's p-value (the two-sample test's and the known-probability
    test's) and Holm's rejection over the loop's prompts at family-wise level `alpha`, with the count
    of rejections per loop, and the power planned for the prompt's N against the planted control."""
    out = []
    for key, g in rows.groupby(CELL, sort=False):
        reject = holm(list(g["p_value"]), alpha)
        known = holm(list(g["p_known"]), alpha) if "p_known" in g else [False] * len(g)
        for r, rej, rej_known in zip(g.itertuples(), reject, known):
            out.append(
                dict(zip(CELL, key))
                | {
                    "prompt_id": r.prompt_id,
                    "domain": r.domain,
                    "n_samples": r.n_samples,
                    "m": r.m,
                    "p_first": float(r.p_positions[0]),
                    "p_min_position": float(min(r.p_positions)),
                    "p_prefix": r.p_prefix,
                    "p_value": r.p_value,
                    "alpha": alpha,
                    "rejected": bool(rej),
                    "n_prompts": len(g),
                    "n_rejected": int(sum(reject)),
                    "n_below_alpha": int((g["p_value"] < alpha).sum()),
                    # the known-probability test (orthrus/audit/known_p.py); a row measured before it has none
                    "p_known": getattr(r, "p_known", float("nan")),
                    "rejected_known": bool(rej_known),
                    "n_rejected_known": int(sum(known)),
                    "planned_power": getattr(r, "planned_power", float("nan")),
                }
            )
    df = pd.DataFrame(out, columns=TWO_SAMPLE_COLUMNS)
    df[ERRORS] = 0
    return df


def fig_sampling_tv(df: pd.DataFrame):
    """Per cell, the mean and the maximum per-position TV (log scale), the honest loop beside the
    planted control."""
    from orthrus.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    cells = df[["precision", "attention", "temperature", "top_p"]].drop_duplicates().reset_index(drop=True)
    labels = [
        f"{r.precision}/{r.attention}\nT={r.temperature:g}" + (f" p={r.top_p:g}" if r.top_p < 1 else "")
        for r in cells.itertuples()
    ]
    for k, (decoder, marker) in enumerate(((DIFFUSION_DECODER, "o"), (PLANTED, "x"))):
        d = df[df["decoder"] == decoder].merge(cells.reset_index(), on=list(cells.columns))
        floor = 1e-12  # a TV of exactly 0 drawn at the axis' floor
        x = d["index"] + (k - 0.5) * 0.2
        ax.scatter(x, d["tv_mean"].clip(lower=floor), marker=marker, label=f"{decoder} mean", color=f"C{k}")
        ax.scatter(x, d["tv_max"].clip(lower=floor), marker=marker, label=f"{decoder} max", color=f"C{k}", alpha=0.4)
    ax.set_yscale("log")
    ax.set_xticks(range(len(cells)), labels, fontsize=7)
    ax.set_ylabel("per-position TV vs single-step sampling")
    ax.set_title("Sampled speculative decoding: distance from the AR model's distribution", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
