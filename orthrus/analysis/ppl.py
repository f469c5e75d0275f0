"""Perplexity of the reference response against exact match: the mean PPL of matching and of
diverging prompts (`ppl_by_match.csv`) and the logistic regression
`match ~ log PPL + length + C(domain)` (`ppl_logit.csv`), which `orthrus figures` draws: the plain
maximum-likelihood fit, or Firth's penalised fit where the plain one separates."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from orthrus.contracts import CONFIG, PPL_BY_MATCH_COLUMNS, PPL_LOGIT_COLUMNS, SPECULATIVE
from orthrus.stats import t_ci

LOG_PPL = "np.log(ppl)"  # the log-PPL term of the formula
FIT_MLE, FIT_FIRTH = "mle", "firth"  # ppl_logit.csv's `fit`: which estimator gave the row


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


class _Separated(_NotEstimable):
    """The plain fit separates or quasi-separates: its maximum-likelihood estimate is infinite, but
    Firth's penalised fit (`_fit_firth`) still has a finite one."""


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
    """The statsmodels fit; _Separated on separation or no convergence (the sign of
    quasi-separation), _NotEstimable on a singular design."""
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import PerfectSeparationError, PerfectSeparationWarning

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence etc.: checked below
            warnings.simplefilter("error", PerfectSeparationWarning)  # takes precedence
            res = smf.logit(formula, data=d).fit(disp=0, maxiter=200)
    except (PerfectSeparationError, PerfectSeparationWarning):
        raise _Separated("perfect separation") from None
    except np.linalg.LinAlgError as exc:
        raise _NotEstimable(f"singular design ({exc})") from None
    except Exception as exc:  # pragma: no cover - any other estimation failure
        raise _NotEstimable(f"fit failed: {type(exc).__name__}: {exc}") from None
    if not res.mle_retvals.get("converged", True):
        raise _Separated("did not converge (likely quasi-separation)")
    return res


def _curve_intercept(params, names: list, exog) -> float:
    """The intercept of the curve `orthrus figures` draws: beta0 plus the other terms (length,
    domain) at their mean over the fitted rows."""
    other = [i for i, name in enumerate(names) if name != LOG_PPL]
    mean_row = np.asarray(exog, dtype=float).mean(axis=0)
    return float(np.asarray(params, dtype=float)[other] @ mean_row[other])


def _estimates(res, alpha: float) -> dict:
    """beta1 (log PPL) with its Wald CI and p-value, and the curve `orthrus figures` draws:
    P(match | ppl) = sigmoid(curve_intercept + beta1 * log ppl), where curve_intercept is the
    intercept (beta0) plus the other terms (length, domain) averaged over the fitted rows."""
    beta, se = float(res.params[LOG_PPL]), float(res.bse[LOG_PPL])
    if not (math.isfinite(beta) and math.isfinite(se)):
        raise _NotEstimable("not estimable (non-finite coefficient or standard error)")
    ci = res.conf_int(alpha=alpha).loc[LOG_PPL]
    return dict(
        beta1=beta,
        ci_low=float(ci.iloc[0]),
        ci_high=float(ci.iloc[1]),
        p_value=float(res.pvalues[LOG_PPL]),
        beta0=float(res.params["Intercept"]),
        curve_intercept=_curve_intercept(res.params, list(res.model.exog_names), res.model.exog),
        fit=FIT_MLE,
    )


def _fit_firth(formula: str, d: pd.DataFrame, alpha: float) -> dict:
    """Firth's bias-reduced logit (Firth 1993) on the plain fit's own design, for data that
    separates: its penalised likelihood (the Jeffreys prior) has a finite maximum whenever the
    design has full rank (Kosmidis and Firth 2021), so beta1 has an estimate where the plain
    fit's is infinite. The interval is the profile penalised-likelihood one and the p-value the
    penalised likelihood-ratio test's, as Heinze and Schemper (2002) and R's logistf do: under
    separation the penalised likelihood is far from quadratic, and Wald's interval misstates it.

    firthmodels (MIT, maintained, checked against logistf) does the fitting; the numpy backend so
    that whether numba is installed does not change the numbers."""
    import statsmodels.formula.api as smf
    from firthmodels import FirthLogisticRegression

    model = smf.logit(formula, data=d)  # the design only: nothing is fitted here
    names = list(model.exog_names)
    j = names.index(LOG_PPL)
    est = FirthLogisticRegression(backend="numpy", fit_intercept=False, max_iter=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # non-convergence: checked below, as NaN
        est.fit(np.asarray(model.exog, dtype=float), np.asarray(model.endog, dtype=float))
        ok = est.converged_
        # logistf's plcontrol(maxit = 100): a separated direction's profile is flat and slow to bound
        ci = est.conf_int(alpha=alpha, method="pl", features=j, max_iter=100)[j] if ok else (math.nan,) * 2
        p = float(est.lrt(j).lrt_pvalues_[j]) if ok else math.nan
    beta = float(est.coef_[j])
    if not (ok and math.isfinite(beta) and math.isfinite(p) and np.isfinite(ci).all()):
        raise _NotEstimable("Firth's penalised fit did not converge")
    return dict(
        beta1=beta,
        ci_low=float(ci[0]),
        ci_high=float(ci[1]),
        p_value=p,
        beta0=float(est.coef_[names.index("Intercept")]),
        curve_intercept=_curve_intercept(est.coef_, names, model.exog),
        fit=FIT_FIRTH,
    )


def _fit(formula: str, d: pd.DataFrame, alpha: float, notes: list) -> dict:
    """The plain (maximum-likelihood) fit where it has a finite estimate; Firth's where it
    separates, with the plain fit's failure in `notes`. Where the plain fit is finite it is kept,
    so that every table it gave before is unchanged."""
    try:
        return _estimates(_fit_logit(formula, d), alpha)
    except _Separated as exc:
        notes.append(f"plain fit: {exc}; Firth's penalised fit used")
        return _fit_firth(formula, d, alpha)


def fit_ppl_logit(df: pd.DataFrame, alpha: float = 0.05, min_rows: int = 10) -> dict:
    """Fit `match ~ np.log(ppl) + length + C(domain)`; return beta1 (log PPL), its CI and p-value,
    and the parameters of the fitted curve (`_estimates`).

    `df` needs columns match (bool), ppl, length, domain. Never raises on data that cannot be
    estimated: the coefficients are NaN and `note` says why. Domains whose outcome is constant
    carry no information on beta1 (their dummy would diverge) and are dropped, with a note. Where
    the plain fit still separates, Firth's penalised fit stands in (`_fit`); `fit` names which
    (`mle`, `firth`, or empty where nothing was estimated).
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
        "fit": "",
    }
    d = _logit_rows(df)
    out["n"] = int(len(d))
    notes = []
    try:
        d, formula = _logit_design(d, min_rows, notes)
        out.update(_fit(formula, d, alpha, notes), n=int(len(d)))
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
