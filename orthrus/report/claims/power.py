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

import pandas as pd
from scipy.stats import norm

from orthrus.contracts import CONFIG
from orthrus.report.claims.base import UNDERPOWERED
from orthrus.stats import Pilot, needed_n, power

DEFAULT_TARGET = 0.9


def pilots(section: dict | None) -> dict[str, Pilot]:
    """The config's `analysis.power.pilot` (claim -> effect, se, n) as Pilots."""
    given = (section or {}).get("pilot") or {}
    return {c: Pilot(float(p["effect"]), float(p["se"]), int(p["n"])) for c, p in given.items()}


def target(section: dict | None) -> float:
    return float((section or {}).get("target", DEFAULT_TARGET))


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
