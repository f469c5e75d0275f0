"""Tables 5 and 6: diverging prompts had a less certain reference."""

from __future__ import annotations

import math
from pathlib import Path

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
from orthrus.stats import welch


def _t_stderr(mean: float, high: float, n: int) -> float:
    """The standard error behind a two-sided 95% t interval's upper bound (`orthrus.stats.t_ci`)."""
    from scipy import stats as st

    if n < 2 or math.isnan(high):
        return math.nan
    return (high - mean) / float(st.t.ppf(0.975, n - 1))


def ppl_higher(tables: Path, s: Settings) -> list[dict]:
    pm = read_table(tables, "ppl_by_match.csv")
    if pm is None:
        return missing_row("ppl-higher-when-diverging", f"every {REDUCED} cell", "no ppl_by_match.csv")
    out = []
    d = lossless_cells(pm, REDUCED, speculative=True)
    for key, g in d.groupby(CONFIG, sort=True):
        subject = "/".join(map(str, key))
        by = dict(zip(g["matched"].astype(str) == "True", g.itertuples()))
        div, mat = by.get(False), by.get(True)
        n_div, n_mat = (int(x.n) if x is not None else 0 for x in (div, mat))
        test = "Welch's t-test, mean reference PPL of diverging minus matching prompts (95% CI)"
        if min(n_div, n_mat) < 2:
            out.append(
                claim_row(
                    "ppl-higher-when-diverging",
                    subject,
                    n=n_div + n_mat,
                    test=test,
                    threshold="CI > 0",
                    reason=f"too few {'diverging' if n_div < 2 else 'matching'} prompts ({min(n_div, n_mat)})",
                    errors=error_count(g),
                )
            )
            continue
        diff, low, high, p = welch(
            div.mean_ppl,
            _t_stderr(div.mean_ppl, div.ci_high, n_div),
            n_div,
            mat.mean_ppl,
            _t_stderr(mat.mean_ppl, mat.ci_high, n_mat),
            n_mat,
            s.alpha,
        )
        ok = low > 0
        out.append(
            claim_row(
                "ppl-higher-when-diverging",
                subject,
                "mean PPL difference",
                diff,
                (low, high),
                n_div + n_mat,
                test,
                "CI > 0",
                p,
                HOLDS if ok else FAILS,
                f"diverging {div.mean_ppl:.3f} (n={n_div}) vs matching {mat.mean_ppl:.3f} (n={n_mat})",
                error_count(g),
            )
        )
    return out


_BETA1_MODEL = "logit P(match) = b0 + b1 log PPL + b2 length + domain"


def _beta1_test(fit) -> str:
    """The test behind the row's p-value and interval: the plain fit's Wald test, or, where the
    plain fit separated (`fit` == firth, orthrus.analysis.ppl), Firth's penalised fit with its
    penalised likelihood-ratio test and profile interval. A table from before the `fit` column
    has plain fits only."""
    if fit == "firth":
        return f"{_BETA1_MODEL}, Firth's penalised fit (the plain fit separates), penalised likelihood-ratio test of b1"
    return f"{_BETA1_MODEL}, Wald test of b1"


def beta1_negative(tables: Path, s: Settings) -> list[dict]:
    lg = read_table(tables, "ppl_logit.csv")
    if lg is None:
        return missing_row("beta1-negative", f"every {REDUCED} cell", "no ppl_logit.csv")
    out = []
    for _, r in lossless_cells(lg, REDUCED, speculative=True).iterrows():
        beta, p = float(r["beta1"]), float(r["p_value"])
        test = _beta1_test(r.get("fit"))
        if math.isnan(beta) or math.isnan(p):
            note = r.get("note")
            out.append(
                claim_row(
                    "beta1-negative",
                    cell_name(r),
                    "beta1",
                    n=int(r["n"]),
                    test=test,
                    threshold=f"b1 < 0, p < {s.alpha:g}",
                    reason=note if isinstance(note, str) and note else "not estimable",
                    errors=int(r.get(ERRORS, 0)),
                )
            )
            continue
        ok = beta < 0 and p < s.alpha
        reason = "" if ok else ("b1 >= 0" if beta >= 0 else f"p = {p:.3g} >= {s.alpha:g}")
        out.append(
            claim_row(
                "beta1-negative",
                cell_name(r),
                "beta1",
                beta,
                (r["ci_low"], r["ci_high"]),
                int(r["n"]),
                test,
                f"b1 < 0, p < {s.alpha:g}",
                p,
                HOLDS if ok else FAILS,
                reason,
                int(r.get(ERRORS, 0)),
            )
        )
    return out
