"""Servers under load (load.csv): match rate against concurrency 1 and distinct completions per prompt,
against the requests in flight."""

from __future__ import annotations

import pandas as pd

from orthrus.plotting import pyplot
from orthrus.report.figures.base import _empty, _errbar, _legend


def fig_load(load: pd.DataFrame | None):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.8), squeeze=False)
    match_ax, distinct_ax = axes[0]
    match_ax.set_title("Greedy output against the same server at concurrency 1")
    distinct_ax.set_title("Distinct completions per prompt over the repeats")
    if load is None or not len(load):
        for ax in (match_ax, distinct_ax):
            _empty(ax, "no server runs under load (decode.engines: engine openai)")
        fig.tight_layout()
        return fig
    # one series per entry (its runs NAME-c1, NAME-c4, ...), labelled with what it serves
    entry = load["model"].astype(str).str.replace(r"-c\d+$", "", regex=True)
    series = list(load.assign(entry=entry).sort_values("concurrency").groupby("entry", sort=True))
    for i, (name, s) in enumerate(series):
        color = plt.cm.tab20(i % 20)  # more entries than the default cycle has colours
        r = s.iloc[0]
        planted = " (planted)" if str(r["planted"]).lower() == "true" else ""
        label = f"{name}: {r['server']} {r['method']} {r['precision']}{planted}"
        # the runs at 1 are compared with another reference (the in-process one, or the plain run): only the
        # runs under load go on the match panel
        under = s[s["concurrency"] > 1]
        if len(under):
            match_ax.errorbar(
                under["concurrency"],
                under["match_rate"],
                yerr=_errbar(under["match_rate"], under["ci_low"], under["ci_high"]),
                fmt="o-",
                capsize=3,
                label=label,
                color=color,
            )
        distinct_ax.plot(s["concurrency"], s["distinct_mean"], "o-", label=label, color=color)
    ticks = sorted(int(c) for c in load["concurrency"].unique())
    for ax in (match_ax, distinct_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("requests in flight")
        _legend(ax, len(series))
    match_ax.set_ylabel("match rate vs concurrency 1 (Wilson 95% CI)")
    match_ax.set_ylim(-0.05, 1.05)
    distinct_ax.set_ylabel("distinct completions per prompt (mean)")
    fig.tight_layout()
    return fig
