"""Table 6's logit where the plain fit separates: Firth's penalised fit, named in `fit`, and the
claim `beta1-negative` testable on it (issue 63, item 6); where it does not, the plain fit as before."""

import math

import numpy as np
import pandas as pd
import pytest

from orthrus.analysis.ppl import LOG_PPL, fit_ppl_logit, ppl_logit
from orthrus.report.claims.base import DEFAULT_SETTINGS
from orthrus.report.claims.perplexity import beta1_negative

FORMULA = "match ~ np.log(ppl) + length + C(domain)"


def _separated(n=40, seed=0, quasi=False):
    """Every prompt below a log PPL of 0.3 matches and every one above diverges (perfect
    separation); `quasi`: a few prompts at exactly 0.3 go either way (quasi-separation), as the
    real model's Orthrus cell at 72 prompts does."""
    rng = np.random.default_rng(seed)
    lp = np.sort(rng.uniform(0, 0.6, n))
    match = lp < 0.3
    if quasi:
        lp[n // 2 - 2 : n // 2 + 2] = 0.3
        match[n // 2 - 2 : n // 2 + 2] = [True, False, True, False]
    dom = np.array(["a", "b"] * (n // 2))
    return pd.DataFrame(dict(match=match, ppl=np.exp(lp), length=rng.integers(20, 129, n), domain=dom))


def _mixed(n=500, seed=1, beta=-10.0):
    """A logit with overlap everywhere: the plain fit is finite."""
    rng = np.random.default_rng(seed)
    lp = rng.uniform(0, 0.6, n)
    length = rng.integers(20, 129, n)
    p = 1 / (1 + np.exp(-(2.5 + beta * lp + 0.002 * (length - 70))))
    dom = rng.choice(["a", "b", "c"], n)
    return pd.DataFrame(dict(match=rng.random(n) < p, ppl=np.exp(lp), length=length, domain=dom))


def _design(d):
    import statsmodels.formula.api as smf

    typed = d.assign(match=d["match"].astype(int), length=d["length"].astype(float))
    return smf.logit(FORMULA, data=typed)


def _firth_by_hand(model):
    """Firth's estimate as the maximum of l(b) + log det(X'WX) / 2, by a general-purpose optimiser:
    a check of the library's Newton iterations that shares none of their code."""
    from scipy.optimize import minimize

    x, y = np.asarray(model.exog, float), np.asarray(model.endog, float)

    def minus_penalised(b):
        eta = x @ b
        w = 1 / (1 + np.exp(-eta)) * (1 / (1 + np.exp(eta)))
        loglik = y @ eta - np.logaddexp(0, eta).sum()
        return -(loglik + 0.5 * np.linalg.slogdet(x.T @ (w[:, None] * x))[1])

    res = minimize(minus_penalised, np.zeros(x.shape[1]), method="BFGS", options=dict(gtol=1e-9, maxiter=10_000))
    return dict(zip(model.exog_names, res.x))


@pytest.mark.parametrize("quasi", [False, True])
def test_separated_data_get_a_finite_firth_estimate_of_the_right_sign(quasi):
    d = _separated(quasi=quasi)
    fit = fit_ppl_logit(d)
    assert fit["fit"] == "firth" and "Firth's penalised fit used" in fit["note"]
    assert math.isfinite(fit["beta1"]) and fit["ci_low"] < fit["beta1"] < fit["ci_high"] < 0
    assert fit["p_value"] < 0.05
    # the estimate is Firth's: the penalised likelihood's maximum, found here another way
    by_hand = _firth_by_hand(_design(d))
    assert fit["beta1"] == pytest.approx(by_hand[LOG_PPL], rel=1e-4)
    assert fit["beta0"] == pytest.approx(by_hand["Intercept"], rel=1e-4)


def test_a_fit_that_does_not_separate_keeps_the_plain_fits_numbers():
    d = _mixed()
    fit = fit_ppl_logit(d)
    res = _design(d).fit(disp=0, maxiter=200)
    ci = res.conf_int().loc[LOG_PPL]
    assert fit["fit"] == "mle" and fit["note"] == ""
    want = (res.params[LOG_PPL], ci.iloc[0], ci.iloc[1], res.pvalues[LOG_PPL], res.params["Intercept"])
    assert (fit["beta1"], fit["ci_low"], fit["ci_high"], fit["p_value"], fit["beta0"]) == want


def test_a_fit_that_cannot_be_estimated_names_no_estimator():
    fit = fit_ppl_logit(_mixed().assign(match=True))
    assert fit["fit"] == "" and math.isnan(fit["beta1"]) and "all matched" in fit["note"]


def _traj(d, model="ce-k8"):
    """The trajectory rows `ppl_logit` reads, for one bf16 Orthrus cell."""
    return d.rename(columns={"length": "ref_n_tokens"}).assign(
        model=model, decoder="orthrus", precision="bf16", attention="sdpa"
    )


def test_the_claim_is_testable_on_separated_data(tmp_path):
    """beta1-negative reads the Firth row's estimate and its penalised likelihood-ratio p-value: a
    verdict where the plain fit left `untestable`, and the test says which fit it was."""
    traj = pd.concat([_traj(_separated(), "sep"), _traj(_mixed(), "mixed")])
    table = ppl_logit(traj)
    table.to_csv(tmp_path / "ppl_logit.csv", index=False)
    rows = {r["subject"]: r for r in beta1_negative(tmp_path, DEFAULT_SETTINGS)}
    sep, mixed = rows["sep/orthrus/bf16/sdpa"], rows["mixed/orthrus/bf16/sdpa"]
    want = table.set_index("model").loc["sep"]
    assert sep["verdict"] == "holds" and (sep["statistic"], sep["p_value"]) == (want.beta1, want.p_value)
    assert "Firth" in sep["test"] and "likelihood-ratio" in sep["test"]
    assert mixed["verdict"] == "holds" and mixed["test"].endswith("Wald test of b1") and "Firth" not in mixed["test"]


def test_the_summary_names_a_firth_row():
    """The rendered Table 6 says which rows are Firth's; a plain row reads as it always did."""
    from orthrus.report import summary

    traj = pd.concat([_traj(_separated(), "sep"), _traj(_mixed(), "mixed")])
    ppl = pd.DataFrame(columns=["model", "precision", "attention", "matched", "n", "mean_ppl"])
    lines = summary._divergence_and_ppl(ppl, ppl_logit(traj), ["sep", "mixed"], "bf16", "sdpa")
    sep, mixed = (next(x for x in lines if x.startswith(f"| {m} |")) for m in ("sep", "mixed"))
    assert "(Firth)" in sep and "(Firth)" not in mixed
