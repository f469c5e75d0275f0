"""Table 7: no systematic loss on the benchmarks (TOST against the AR reference)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from orthrus.contracts import PRIMARY_METRICS
from orthrus.report.claims.base import (
    FAILS,
    HOLDS,
    Settings,
    claim_row,
    read_table,
)
from orthrus.stats import tost

# lm-eval metrics already on a 0-100 scale; every other score is a 0-1 share (x 100 points)
HUNDRED_SCALE = ("chrf", "bleu", "ter")


def points(metric: str) -> float:
    """Points per unit of an lm-eval metric ("name,filter"): 1 for a 0-100 metric, 100 for a share."""
    return 1.0 if metric.partition(",")[0] in HUNDRED_SCALE else 100.0


def _primary(tables: Path, ag: pd.DataFrame) -> pd.Series:
    """Which agreement rows are their task's primary metric (benchmarks.csv's flag, else the index)."""
    bench = read_table(tables, "benchmarks.csv")
    if bench is not None and "primary" in bench.columns:
        keys = ["model", "decoder", "precision", "attention", "task", "metric"]
        flags = {tuple(k): bool(p) for k, p in zip(bench[keys].astype(str).values.tolist(), bench["primary"])}
        return pd.Series([flags.get(tuple(k), False) for k in ag[keys].astype(str).values.tolist()], index=ag.index)
    return pd.Series([m in PRIMARY_METRICS.get(t, []) for t, m in zip(ag["task"], ag["metric"])], index=ag.index)


def benchmarks_equivalent(tables: Path, s: Settings) -> list[dict]:
    ag = read_table(tables, "benchmarks_agreement.csv")
    if ag is None:  # the benchmarks are off (benchmarks.enabled: false): no claim to test
        return []
    out = []
    m, alpha = s.equivalence_margin, s.alpha
    for _, r in ag[_primary(tables, ag)].iterrows():
        subject = (
            f"{r['model']}/{r['decoder']}/{r['precision']}/{r['attention']} vs "
            f"{r['reference_model']}/{r['reference_decoder']}: {r['task']} {r['metric']}"
        )
        scale, n = points(str(r["metric"])), int(r["n"])
        test = f"paired TOST on the same {n} documents, H0: |difference| >= {m:g} points ({1 - 2 * alpha:.0%} CI)"
        mean = r["paired_diff"] if "paired_diff" in r.index else r["score_diff"]
        se = r["paired_stderr"]
        if pd.isna(se) or pd.isna(mean):
            out.append(
                claim_row(
                    "benchmarks-equivalent",
                    subject,
                    n=n,
                    test=test,
                    threshold=f"+-{m:g} points",
                    reason=f"no per-document score for {r['metric']} (a corpus-level metric)",
                )
            )
            continue
        t = tost(float(mean) * scale, float(se) * scale, n, -m, m, alpha)
        if math.isnan(t.p_value):
            out.append(
                claim_row(
                    "benchmarks-equivalent",
                    subject,
                    n=n,
                    test=test,
                    threshold=f"+-{m:g} points",
                    reason=f"too few documents ({n})",
                )
            )
            continue
        ok = t.p_value < alpha
        reason = (
            ""
            if ok
            else (f"equivalence not shown: the interval [{t.ci_low:.2f}, {t.ci_high:.2f}] is not inside +-{m:g} points")
        )
        out.append(
            claim_row(
                "benchmarks-equivalent",
                subject,
                "mean paired score difference (points)",
                t.diff,
                (t.ci_low, t.ci_high),
                n,
                test,
                f"+-{m:g} points",
                t.p_value,
                HOLDS if ok else FAILS,
                reason,
            )
        )
    return out
