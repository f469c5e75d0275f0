"""Near-ties: the top-1/top-2 logit margin at each first divergence (`forensics.csv`, from the
forensics rows) and along the teacher's own greedy path, per domain (`uncertainty_by_domain.csv`,
from the perplexity file). A margin below the near-tie threshold is one rounding can flip."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orthrus.analysis.load import read_parquet_checked, warn
from orthrus.audit.verdict import ROUNDING_ULPS, rounding_bound
from orthrus.contracts import CONFIG, FORENSICS_SUMMARY_COLUMNS, PRECISION_RANK, UNCERTAINTY_COLUMNS, VERDICTS

DEFAULT_NEAR_TIE = 0.125


def verdict_counts(verdicts: pd.Series, n: int | None = None) -> dict:
    """The VERDICT_COUNTS of some divergences' verdicts; `n` divergences in all when some have
    no forensics row."""
    counts = {f"n_{v}": int((verdicts == v).sum()) for v in VERDICTS}
    total = len(verdicts) if n is None else n
    return counts | {"n_no_verdict": int(total - sum(counts.values()))}


def forensics_summary(
    fx: pd.DataFrame, near_tie: float = DEFAULT_NEAR_TIE, rounding_ulps: float | dict = ROUNDING_ULPS
) -> pd.DataFrame:
    """Per configuration: the divergences, their median margins, the share of near and exact
    ties, the most frequent first diverging layer (the lowest on a tie), the largest reference gap
    in ulps, the share within `rounding_ulps` ulps (of the logits' magnitude, in the decoding
    precision: the unit in which rounding can part two logits) and the count of each verdict."""
    rows = []
    for key, g in fx.groupby(CONFIG, sort=True):
        m = g["margin_native"].dropna()
        layers = g["first_layer_diverging"].dropna()
        mode = None
        if len(layers):
            counts = layers.astype(int).value_counts()
            mode = int(min(counts[counts == counts.max()].index))
        gaps = g["gap_ulps"].dropna()
        k = rounding_bound(rounding_ulps, dict(zip(CONFIG, key))["precision"])
        rows.append(
            dict(
                zip(CONFIG, key),
                n_divergences=len(g),
                median_margin_native=float(m.median()) if len(m) else math.nan,
                median_margin_fp32=float(g["margin_fp32"].median()) if g["margin_fp32"].notna().any() else math.nan,
                near_tie_threshold=float(near_tie),
                frac_near_tie=float((m < near_tie).mean()) if len(m) else math.nan,
                frac_exact_tie=float((m == 0).mean()) if len(m) else math.nan,
                mode_first_layer=mode,
                max_gap_ulps=float(gaps.max()) if len(gaps) else math.nan,
                rounding_ulps=k,
                frac_within_ulps=float((gaps.abs() <= k).mean()) if len(gaps) else math.nan,
                **verdict_counts(g["verdict"]),
            )
        )
    out = pd.DataFrame(rows, columns=FORENSICS_SUMMARY_COLUMNS)
    out["mode_first_layer"] = out["mode_first_layer"].astype("Int64")
    return out


def _uncertainty_row(dom: str, g: pd.DataFrame, near_tie: float, declared: bool) -> dict:
    from orthrus.world.domains import UNCERTAINTY

    margins = np.concatenate([np.asarray(m, dtype=float) for m in g["margins"]] or [np.zeros(0)])
    return {
        "domain": dom,
        "declared": UNCERTAINTY.get(dom, "") if declared else "",
        "n_prompts": len(g),
        "n_steps": int(margins.size),
        "mean_entropy": float(g["entropy"].mean()),
        "near_tie_share": float((margins < near_tie).mean()) if margins.size else math.nan,
        # a trajectory can part at any of its near-ties: their count, not their share, sets the odds
        "near_ties_per_prompt": float((margins < near_tie).sum() / len(g)) if len(g) else math.nan,
        "near_tie_threshold": float(near_tie),
    }


def uncertainty_by_domain(
    ppl_path, reference: str | None, near_tie: float = DEFAULT_NEAR_TIE, declared: bool = False
) -> pd.DataFrame:
    """Per domain (and 'all'): the teacher's entropy and near-tie share along one greedy path per
    prompt, the highest-precision reference trajectory (fp32 where decoded; first attention).
    `declared` fills in the tiny world's claim per domain (its prompts only)."""
    empty = pd.DataFrame(columns=UNCERTAINTY_COLUMNS)
    if ppl_path is None:
        return empty
    need = ["prompt_id", "domain", "entropy", "margins", "precision", "attention"]
    df = read_parquet_checked(ppl_path, ["prompt_id"], need + ["model"], what="perplexity file")
    if any(c not in df.columns for c in need):
        warn(f"{ppl_path}: no entropy/margins columns; uncertainty table left empty")
        return empty
    if reference is not None and "model" in df.columns:
        df = df[df["model"].astype(str) == reference]
    best = min(df["precision"].astype(str), key=lambda p: PRECISION_RANK.get(p, len(PRECISION_RANK)), default=None)
    df = df[df["precision"].astype(str) == best]
    att = sorted(df["attention"].astype(str).unique())[:1]
    df = df[df["attention"].astype(str).isin(att)]
    parts = [(d, g) for d, g in df.groupby("domain", sort=True)] + [("all", df)]
    rows = [
        _uncertainty_row(dom, g, near_tie, declared)
        | {"scored_precision": best, "scored_attention": att[0] if att else ""}
        for dom, g in parts
    ]
    return pd.DataFrame(rows, columns=UNCERTAINTY_COLUMNS)
