"""Power planned before a run: the sample a claim's test needs, from the effect a pilot run measured.

A claim tested by an estimate and its standard error (Welch's difference of perplexities, Table 5;
the logistic fit's beta1, Table 6) rejects at level alpha with probability about
Phi(|effect| / se(n) - z(1 - alpha/2)), where se(n) = se_pilot * sqrt(n_pilot / n): the pilot's
effect, standard error and n (a committed run's claims.csv) give the power at any n, and the n a
target power needs. The config's `analysis.power` names a pilot per claim; a claim whose planned power
at its cell's n (the prompts the cell decodes, fixed by the config, not by what they gave) is below
the target says `underpowered`, whatever its test gave: an underpowered test holds on one machine and
fails on another by chance, and its verdict must say neither.
"""

from __future__ import annotations

from typing import Literal

import pandas as pd
from pydantic import Field
from scipy.stats import norm

from orthrus.config import Int, Num, Section
from orthrus.contracts import CONFIG
from orthrus.report.claims.base import UNDERPOWERED
from orthrus.stats import Pilot, needed_n, power

PLANNED = ("ppl-higher-when-diverging", "beta1-negative")  # the claims tested by an estimate and its error
DEFAULT_TARGET = 0.9


class PilotEstimate(Section):
    """One claim's pilot."""

    SPARSE = True

    effect: Num = Field(description="The pilot's estimate (not 0).")
    se: Num = Field(gt=0, description="Its standard error.")
    n: Int = Field(ge=2, description="The prompts it rested on.")


class Power(Section):
    """The power planned for the claims tested by an estimate and its standard error (`orthrus power`,
    docs/USAGE.md): a claim whose power at its cell's n is below `target` says `underpowered`. No pilot: no plan."""

    target: Num = Field(DEFAULT_TARGET, gt=0.5, lt=1, description="The power each planned claim needs.")
    pilot: dict[Literal[PLANNED], PilotEstimate] = Field(
        {}, description="claim -> {effect, se, n}: the pilot's estimate, its standard error and its prompts."
    )


def pilots(section: Power | None) -> dict[str, Pilot]:
    """The config's `analysis.power.pilot` (claim -> effect, se, n) as Pilots; None: no plan."""
    if section is None:
        return {}
    return {c: Pilot(float(p.effect), float(p.se), p.n) for c, p in section.pilot.items()}


def pilot_from_claims(claims: pd.DataFrame, claim: str) -> Pilot | None:
    """A claim's pilot from a run's claims table: its weakest tested subject (the smallest effect over
    standard error, the standard error read off the 95% interval), or None where none was tested."""
    rows = claims[(claims["claim"] == claim) & claims["statistic"].notna() & claims["ci_low"].notna()]
    if rows.empty:
        return None
    se = (rows["ci_high"] - rows["ci_low"]) / (2 * norm.ppf(0.975))
    z = rows["statistic"].abs() / se
    r, s = rows.loc[z.idxmin()], se.loc[z.idxmin()]
    return Pilot(float(r["statistic"]), float(s), int(r["n"]))


def cell_sizes(match_overall: pd.DataFrame | None) -> dict[str, int]:
    """Each cell's prompts (match_overall.csv's n), by the subject name claims give a cell."""
    if match_overall is None:
        return {}
    return {"/".join(str(r[c]) for c in CONFIG): int(r["n"]) for _, r in match_overall.iterrows()}


def apply(
    rows: pd.DataFrame, plan: dict[str, Pilot], sizes: dict[str, int], alpha: float, target: float
) -> pd.DataFrame:
    """The claims rows with every planned claim's verdict `underpowered` where its cell's planned power
    is below `target`, the reason saying the power and the n it needed (the statistic stays)."""
    out = rows.copy()
    for i, r in out.iterrows():
        pilot = plan.get(r["claim"])
        n = sizes.get(r["subject"])
        if pilot is None or n is None:
            continue
        pw = power(pilot, n, alpha)
        if pw >= target:
            continue
        said = f"{r['verdict']}: {r['reason']}" if r["reason"] else r["verdict"]
        out.at[i, "verdict"] = UNDERPOWERED
        out.at[i, "reason"] = (
            f"planned power {pw:.2f} < {target:g} at n = {n} (pilot effect {pilot.effect:.3g}, se {pilot.se:.3g} "
            f"at n = {pilot.n}; needs n >= {needed_n(pilot, alpha, target)}); the test said {said}"
        )
    return out
