"""The forensics' claims: divergences at near-ties, every one numerics, the planted bug caught."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orthrus.contracts import ERRORS
from orthrus.decoders import PLANTED
from orthrus.report.claims.base import (
    FAILS,
    HOLDS,
    LOSSLESS,
    UNTESTABLE,
    Settings,
    cell_name,
    claim_row,
    missing_row,
    read_table,
)
from orthrus.stats import wilson_ci


def divergence_at_near_tie(tables: Path, s: Settings) -> list[dict]:
    fx = read_table(tables, "forensics.csv")
    if fx is None:
        return missing_row("divergence-at-near-tie", "every configuration", "no forensics.csv")
    fx = fx[fx["decoder"].isin(LOSSLESS)]
    if fx.empty:
        return missing_row("divergence-at-near-tie", "every configuration", "no divergences")
    if "frac_within_ulps" not in fx.columns:
        return missing_row(
            "divergence-at-near-tie",
            "every configuration",
            "forensics.csv predates its margins in ulps (rerun orthrus analyze)",
        )
    out = []
    for _, r in fx.iterrows():
        n, k_ulps = int(r["n_divergences"]), float(r["rounding_ulps"])
        test = (
            f"reference margin at the first divergence within {k_ulps:g} ulps of the logits' magnitude in the "
            "decoding precision (Wilson 95% CI)"
        )
        if n == 0 or pd.isna(r["frac_within_ulps"]):
            out.append(
                claim_row(
                    "divergence-at-near-tie",
                    cell_name(r),
                    n=n,
                    test=test,
                    threshold="every divergence",
                    reason="no divergences",
                    errors=int(r.get(ERRORS, 0)),
                )
            )
            continue
        k = int(round(float(r["frac_within_ulps"]) * n))
        out.append(
            claim_row(
                "divergence-at-near-tie",
                cell_name(r),
                "share within rounding",
                r["frac_within_ulps"],
                wilson_ci(k, n),
                n,
                test,
                "every divergence",
                verdict=HOLDS if k == n else FAILS,
                reason=""
                if k == n
                else (
                    f"{n - k} of {n} divergences at a margin of more than {k_ulps:g} "
                    f"ulps (largest {float(r['max_gap_ulps']):g})"
                ),
                errors=int(r.get(ERRORS, 0)),
            )
        )
    return out


def _decoders(tables: Path):
    dec = read_table(tables, "decoders.csv")
    return None if dec is None or "audit" not in dec.columns else dec


def divergences_are_numerics(tables: Path, s: Settings) -> list[dict]:
    """Per lossless decoder cell that diverged: every first divergence has the verdict `tie` or
    `rounding` (orthrus.audit.verdict; none `structural`, none without a verdict)."""
    dec = _decoders(tables)
    if dec is None:
        return missing_row("divergences-are-numerics", "every configuration", "no verdicts in decoders.csv")
    d = dec[dec["decoder"].isin(LOSSLESS) & (dec["match_rate"] < 1)]
    if d.empty:
        return missing_row("divergences-are-numerics", "every configuration", "no divergences")
    out = []
    for _, r in d.iterrows():
        n = int(r["n_tie"] + r["n_rounding"] + r["n_structural"] + r["n_no_verdict"])
        ok = r["n_structural"] == 0 and r["n_no_verdict"] == 0
        out.append(
            claim_row(
                "divergences-are-numerics",
                cell_name(r),
                "structural or unexplained divergences",
                r["n_structural"] + r["n_no_verdict"],
                n=n,
                test="verdict of each first divergence (tie / rounding / structural)",
                threshold="= 0",
                verdict=HOLDS if ok else FAILS,
                reason=f"{int(r['n_tie'])} tie, {int(r['n_rounding'])} rounding, {int(r['n_structural'])} "
                f"structural, {int(r['n_no_verdict'])} without a verdict",
                errors=int(r.get(ERRORS, 0)),
            )
        )
    return out


def planted_bug_caught(tables: Path, s: Settings) -> list[dict]:
    """Per cell of the planted lossy decoder (decode.controls): the audit calls it `not lossless`.
    Untestable where it did not run, or did not diverge."""
    dec = _decoders(tables)
    d = dec[dec["decoder"] == PLANTED] if dec is not None else pd.DataFrame()
    if d.empty:
        return missing_row("planted-bug-caught", PLANTED, f"{PLANTED} did not run (decode.controls)")
    out = []
    for _, r in d.iterrows():
        diverged = r["match_rate"] < 1
        caught = r["audit"] == "not lossless"
        out.append(
            claim_row(
                "planted-bug-caught",
                cell_name(r),
                "structural divergences",
                r["n_structural"],
                n=int(r["n"]),
                test="the audit's word on the planted lossy decoder",
                threshold="not lossless",
                verdict=(HOLDS if caught else FAILS) if diverged else UNTESTABLE,
                reason=f"audit: {r['audit']}" if diverged else "the planted bug did not diverge here",
                errors=int(r.get(ERRORS, 0)),
            )
        )
    return out
