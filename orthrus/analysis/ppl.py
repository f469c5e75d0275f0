"""Perplexity of the reference response against exact match: the mean PPL of matching and of
diverging prompts (`ppl_by_match.csv`) and the logistic regression
`match ~ log PPL + length + C(domain)` (`ppl_logit.csv`), which `orthrus figures` draws."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from orthrus.contracts import CONFIG, PPL_BY_MATCH_COLUMNS, PPL_LOGIT_COLUMNS, SPECULATIVE
from orthrus.stats import t_ci

LOG_PPL = "np.log(ppl)"  # the log-PPL term of the formula


def ppl_by_match(traj: pd.DataFrame) -> pd.DataFrame:
    """Mean reference-response PPL (95% t CI) of the matching and the diverging prompts of each
    speculative-decoder configuration."""
    d = traj[traj["decoder"].isin(SPECULATIVE) & traj["ppl"].notna()]
    rows = []
    for key, g in d.groupby(CONFIG, sort=True):
        for matched in (True, False):
            v = g.loc[g["match"] == matched, "ppl"].to_numpy(float)
            mean, low, high = t_ci(v)
            rows.append(dict(zip(CONFIG, key), matched=matched, n=int(v.size), mean_ppl=mean, ci_low=low, ci_high=high))
    return pd.DataFrame(rows, columns=PPL_BY_MATCH_COLUMNS)


class _NotEstimable(Exception):
    """The logit cannot be estimated; the message says why (the table's `note`)."""


def _logit_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with a finite positive PPL and a finite length, typed for the formula."""
    d = df[["match", "ppl", "length", "domain"]].copy()
    d["ppl"] = pd.to_numeric(d["ppl"], errors="coerce").astype(float)
    d["length"] = pd.to_numeric(d["length"], errors="coerce").astype(float)
    d = d[np.isfinite(d["ppl"]) & (d["ppl"] > 0) & np.isfinite(d["length"])]
    d["match"] = d["match"].astype(bool).astype(int)
    d["domain"] = d["domain"].astype(str)
    return d


def _logit_design(d: pd.DataFrame, min_rows: int, notes: list) -> tuple[pd.DataFrame, str]:
    """(the rows to fit, the formula): domains with a constant outcome dropped, constant terms
    left out (each said in `notes`); _NotEstimable when too little is left to estimate beta1."""
    if len(d) < min_rows:
        raise _NotEstimable(f"too few rows (n={len(d)} < {min_rows})")
    if d["match"].nunique() < 2:
        raise _NotEstimable("no variance in outcome: " + ("all matched" if d["match"].iloc[0] else "none matched"))
    const = d.groupby("domain")["match"].nunique() < 2
    if const.any():
        dropped = sorted(const[const].index)
        d = d[~d["domain"].isin(dropped)]
        notes.append(f"dropped {len(dropped)} domain(s) with constant outcome: {', '.join(dropped)}")
        if d["match"].nunique() < 2:
            raise _NotEstimable("no variance in outcome after dropping those domains")
    terms = [LOG_PPL]
    if np.log(d["ppl"]).std() == 0 or d["ppl"].nunique() < 2:
        raise _NotEstimable("no variance in log(ppl)")
    if d["length"].nunique() > 1:
        terms.append("length")
    else:
        notes.append("length constant, term dropped")
    if d["domain"].nunique() > 1:
        terms.append("C(domain)")
    n_params = 1 + sum(t != "C(domain)" for t in terms)  # intercept + numeric terms
    if "C(domain)" in terms:
        n_params += d["domain"].nunique() - 1
    if len(d) < max(min_rows, n_params + 2):
        raise _NotEstimable(f"too few rows (n={len(d)}) for {n_params} parameters")
    return d, "match ~ " + " + ".join(terms)


def _fit_logit(formula: str, d: pd.DataFrame):
    """The statsmodels fit; _NotEstimable on separation, a singular design or no convergence."""
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import PerfectSeparationError, PerfectSeparationWarning

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence etc.: checked below
            warnings.simplefilter("error", PerfectSeparationWarning)  # takes precedence
            res = smf.logit(formula, data=d).fit(disp=0, maxiter=200)
    except (PerfectSeparationError, PerfectSeparationWarning):
        raise _NotEstimable("perfect separation") from None
    except np.linalg.LinAlgError as exc:
        raise _NotEstimable(f"singular design ({exc})") from None
    except Exception as exc:  # pragma: no cover - any other estimation failure
        raise _NotEstimable(f"fit failed: {type(exc).__name__}: {exc}") from None
    if not res.mle_retvals.get("converged", True):
        raise _NotEstimable("did not converge (likely quasi-separation)")
    return res


def _estimates(res, alpha: float) -> dict:
    """beta1 (log PPL) with its CI and p-value, and the curve `orthrus figures` draws:
    P(match | ppl) = sigmoid(curve_intercept + beta1 * log ppl), where curve_intercept is the
    intercept (beta0) plus the other terms (length, domain) averaged over the fitted rows."""
    beta, se = float(res.params[LOG_PPL]), float(res.bse[LOG_PPL])
    if not (math.isfinite(beta) and math.isfinite(se)):
        raise _NotEstimable("not estimable (non-finite coefficient or standard error)")
    ci = res.conf_int(alpha=alpha).loc[LOG_PPL]
    names = list(res.model.exog_names)
    other = [i for i, name in enumerate(names) if name != LOG_PPL]
    mean_row = np.asarray(res.model.exog, dtype=float).mean(axis=0)
    params = np.asarray(res.params, dtype=float)
    return dict(
        beta1=beta,
        ci_low=float(ci.iloc[0]),
        ci_high=float(ci.iloc[1]),
        p_value=float(res.pvalues[LOG_PPL]),
        beta0=float(res.params["Intercept"]),
        curve_intercept=float(params[other] @ mean_row[other]),
    )


def fit_ppl_logit(df: pd.DataFrame, alpha: float = 0.05, min_rows: int = 10) -> dict:
    """Fit `match ~ np.log(ppl) + length + C(domain)`; return beta1 (log PPL), its CI and p-value,
    and the parameters of the fitted curve (`_estimates`).

    `df` needs columns match (bool), ppl, length, domain. Never raises on data that cannot be
    estimated: the coefficients are NaN and `note` says why. Domains whose outcome is constant
    carry no information on beta1 (their dummy would diverge) and are dropped, with a note.
    """
    out = {
        "n": 0,
        "beta1": math.nan,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "p_value": math.nan,
        "note": "",
        "beta0": math.nan,
        "curve_intercept": math.nan,
    }
    d = _logit_rows(df)
    out["n"] = int(len(d))
    notes = []
    try:
        d, formula = _logit_design(d, min_rows, notes)
        out.update(_estimates(_fit_logit(formula, d), alpha), n=int(len(d)))
    except _NotEstimable as exc:
        notes.append(str(exc))
    out["note"] = "; ".join(notes)
    return out


def ppl_logit(traj: pd.DataFrame) -> pd.DataFrame:
    """fit_ppl_logit per speculative-decoder configuration, the length being the reference's."""
    d = traj[traj["decoder"].isin(SPECULATIVE) & traj["ppl"].notna()]
    rows = []
    for key, g in d.groupby(CONFIG, sort=True):
        fit = fit_ppl_logit(g.assign(length=g["ref_n_tokens"])[["match", "ppl", "length", "domain"]])
        rows.append(dict(zip(CONFIG, key), **fit))
    return pd.DataFrame(rows, columns=PPL_LOGIT_COLUMNS)
