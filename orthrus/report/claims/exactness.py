"""Tables 3, 4 and 8: fp32 (and fp32 with TF32 products) exact up to rounding, bf16 not."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orthrus.contracts import CONFIG, ERRORS
from orthrus.report.claims.base import (
    FAILS,
    HOLDS,
    REDUCED,
    Settings,
    cell_name,
    claim_row,
    error_count,
    lossless_cells,
    missing_row,
    read_table,
)

# fp32-exact allows a cell to part at rounding ties on few prompts only: bf16 parts on dozens of
# percent, so "exact up to fp32's rounding" keeps the claim's contrast with bf16
FP32_FLOOR = 0.95


def fp32_exact(tables: Path, s: Settings) -> list[dict]:
    return _exact(tables, "fp32-exact", "fp32")


def tf32_exact(tables: Path, s: Settings) -> list[dict]:
    """fp32's claim on the cells that allow TF32 products; no row where the study has none."""
    mo = read_table(tables, "match_overall.csv")
    if mo is None or lossless_cells(mo, "tf32").empty:
        return []
    return _exact(tables, "tf32-exact", "tf32")


def _exact(tables: Path, claim: str, precision: str) -> list[dict]:
    """Every lossless cell at `precision` matches, up to the precision's own rounding."""
    subject = f"every {precision} cell"
    mo = read_table(tables, "match_overall.csv")
    if mo is None:
        return missing_row(claim, subject, "no match_overall.csv")
    d = lossless_cells(mo, precision).sort_values(["match_rate", *CONFIG], kind="stable")
    if d.empty:
        return missing_row(claim, subject, f"no {precision} decoding results")
    worst = d.iloc[0]
    below = d[d["match_rate"] < 1.0]
    reason = (
        f"below 1: {', '.join(f'{cell_name(r)} {r.match_rate:.3f}' for _, r in below.iterrows())}"
        if len(below)
        else f"{len(d)} cells, lowest: {cell_name(worst)}"
    )
    rounding = _fp32_roundings(tables, below, precision)
    if len(below):
        reason += f"; {rounding[1]}"
    tf32 = lossless_cells(mo, "tf32").sort_values(["match_rate", *CONFIG], kind="stable")
    if precision == "fp32" and len(tf32):  # what allowing TF32 does to fp32's exactness
        w = tf32.iloc[0]
        reason += f"; TF32 off here: with TF32 products allowed (tf32-exact, {len(tf32)} cells) the lowest is "
        reason += f"{cell_name(w)} {w.match_rate:.3f}"
    return [
        claim_row(
            claim,
            subject,
            "lowest match rate",
            worst["match_rate"],
            (worst["ci_low"], worst["ci_high"]),
            int(worst["n"]),
            f"exact trajectory match with the AR reference in every cell, up to {precision}'s own rounding: a "
            f"cell below 1 parts on few prompts (Wilson 95% lower bound >= {FP32_FLOOR:g}), each a rounding "
            f"within analysis.rounding_ulps.{precision} ulps",
            f"= 1, or >= {FP32_FLOOR:g} with every divergence within rounding",
            verdict=HOLDS if rounding[0] else FAILS,
            reason=reason,
            errors=error_count(d),
        )
    ]


def _fp32_roundings(tables: Path, below: pd.DataFrame, precision: str = "fp32") -> tuple[bool, str]:
    """(whether every divergence of the fp32 cells in `below` is within rounding, what it says):
    a reference margin within the verdicts' bound in fp32 ulps, none structural or unexplained
    (forensics.csv). fp32 carries 16 more bits than bf16; a tiny world with dense near-ties still
    meets a tie that fine about once in a few hundred prompts, and the paper's "exact" means no
    more than its rounding."""
    if below.empty:
        return True, ""
    rare = below["ci_low"] >= FP32_FLOOR
    if not rare.all():
        return (
            False,
            f"{', '.join(cell_name(r) for _, r in below[~rare].iterrows())}: Wilson lower bound below {FP32_FLOOR:g}",
        )
    fx = read_table(tables, "forensics.csv")
    if fx is None or "frac_within_ulps" not in fx.columns:
        return False, "no forensics.csv with margins in ulps to tell rounding from a loss"
    fx = fx.set_index(CONFIG)
    parts = []
    for _, r in below.iterrows():
        key = tuple(r[c] for c in CONFIG)
        if key not in fx.index:
            return False, f"{cell_name(r)} has no forensics row"
        f = fx.loc[key]
        n, k = int(f["n_divergences"]), float(f["rounding_ulps"])
        if not (f["frac_within_ulps"] == 1 and f["n_structural"] == 0 and f["n_no_verdict"] == 0):
            return (
                False,
                f"{cell_name(r)}: not every one of its {n} divergences is a rounding within {k:g} {precision} ulps",
            )
        parts.append(
            f"{cell_name(r)}: {n} divergence(s), each within {k:g} {precision} ulps (largest {float(f['max_gap_ulps']):g})"
        )
    return True, "; ".join(parts)


def bf16_inexact(tables: Path, s: Settings) -> list[dict]:
    """Per bf16 speculative decoder and model, over the kernels it ran: the claim holds where some
    kernel's Wilson upper bound is below 1 (on a CPU one kernel can be bit-exact between a verify
    block and a single step: the reason names the kernels that matched everywhere)."""
    mo = read_table(tables, "match_overall.csv")
    if mo is None:
        return missing_row("bf16-inexact", f"every {REDUCED} cell", "no match_overall.csv")
    d = lossless_cells(mo, REDUCED, speculative=True)
    if d.empty:
        return missing_row("bf16-inexact", f"every {REDUCED} cell", f"no {REDUCED} speculative decoding results")
    out = []
    for (model, decoder), g in d.groupby(["model", "decoder"], sort=True):
        r = g.sort_values(["ci_high", "attention"]).iloc[0]  # the kernel that parts the most surely
        below = r["match_rate"] < 1.0 and r["ci_high"] < 1.0
        exact = [
            f"{a} ({int(n)} of {int(n)} matched)" for a, n, m in zip(g["attention"], g["n"], g["match_rate"]) if m == 1
        ]
        out.append(
            claim_row(
                "bf16-inexact",
                f"{model}/{decoder}/{REDUCED}",
                f"match rate ({r['attention']})",
                r["match_rate"],
                (r["ci_low"], r["ci_high"]),
                int(r["n"]),
                "Wilson 95% upper bound of the exact-match rate, on the kernel where it is lowest",
                "< 1",
                verdict=HOLDS if below else FAILS,
                reason="; ".join(
                    ([] if below else ["no kernel shows a rate below 1"])
                    + ([f"exact on {', '.join(exact)}"] if exact else [])
                ),
                errors=int(g[ERRORS].sum()) if ERRORS in g.columns else 0,
            )
        )
    return out
