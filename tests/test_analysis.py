"""orthrus analyze / orthrus figures on synthetic decoding results."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from orthrus import analysis
from orthrus.analysis import AnalysisError, analyze
from orthrus.analysis.load import load_forensics
from orthrus.analysis.ppl import fit_ppl_logit
from orthrus.analysis.uncertainty import forensics_summary, uncertainty_by_domain
from orthrus.contracts import TABLES, UNCERTAINTY_COLUMNS
from orthrus.report import figures
from orthrus.stats import wilson_ci

DOMAINS = ["code", "math", "qa"]
N_PER_DOMAIN = 40
REF = "teacher"
MODEL = "orth"


def _row(model, decoder, precision, pid, dom, tokens, n_verify=None, n_diffusion=None):
    n = len(tokens)
    nv = n_verify if n_verify is not None else (n if decoder != "orthrus" else 0)
    return dict(
        model=model,
        decoder=decoder,
        precision=precision,
        attention="eager",
        prompt_id=pid,
        domain=dom,
        prompt_len=5,
        tokens=list(tokens),
        accepted=[],
        n_prefill=1,
        n_diffusion=n_diffusion if n_diffusion is not None else 0,
        n_verify=nv,
        seconds=0.01,
        finish_reason="length",
        error=None,
        env=json.dumps({}),
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Reference at bf16/fp32, Orthrus + own AR view at bf16, Orthrus at fp32, a PPL and forensics file.

    bf16 Orthrus diverges with probability decreasing in log PPL (noisy, not separable);
    fp32 Orthrus matches everywhere.
    """
    tmp = tmp_path_factory.mktemp("world")
    rng = np.random.default_rng(0)
    rows = {k: [] for k in ("ref-bf16", "ref-fp32", "orth-bf16", "ar-bf16", "orth-fp32")}
    ppl_rows, fx_rows, truth = [], [], {}
    for dom in DOMAINS:
        for i in range(N_PER_DOMAIN):
            pid = f"{dom}-{i:03d}"
            toks = [int(t) for t in rng.integers(2, 90, size=24)]
            # reference fp32 differs from reference bf16 on every third prompt
            toks32 = list(toks)
            if i % 3 == 0:
                toks32[10] = 1000
            rows["ref-bf16"].append(_row(REF, "ar-ref", "bf16", pid, dom, toks))
            rows["ref-fp32"].append(_row(REF, "ar-ref", "fp32", pid, dom, toks32))
            rows["ar-bf16"].append(_row(MODEL, "ar", "bf16", pid, dom, toks))
            # orthrus: 24 tokens in 5 verify passes and 5 diffusion passes
            rows["orth-fp32"].append(_row(MODEL, "orthrus", "fp32", pid, dom, toks32, 5, 5))
            ppl = float(np.exp(rng.uniform(0.0, 0.6)))
            p_match = 1 / (1 + np.exp(-(3.0 - 12.0 * np.log(ppl))))
            matched = bool(rng.random() < p_match)
            if matched:
                o = list(toks)
            elif i % 2:
                o = list(toks)
                pos = int(rng.integers(0, 24))
                o[pos] = 999  # substitution: first divergence at pos, Levenshtein 1
                fx_rows.append(
                    dict(
                        model=MODEL,
                        decoder="orthrus",
                        precision="bf16",
                        attention="eager",
                        prompt_id=pid,
                        domain=dom,
                        position=pos,
                        margin_native=[0.0, 0.0625, 0.5][i % 3],
                        margin_fp32=0.01,
                        first_layer_diverging=[1, 1, None][i % 3],
                        max_abs_hidden_diff=[0.0, 0.1],
                    )
                )
            else:
                o = toks[:20]  # stopped early: divergence at 20, Levenshtein 4
            truth[pid] = matched
            rows["orth-bf16"].append(_row(MODEL, "orthrus", "bf16", pid, dom, o, 5, 5))
            ppl_rows.append(dict(prompt_id=pid, ppl=ppl, n_tokens=24, model=REF, precision="fp32"))
    paths = {}
    for k, r in rows.items():
        p = tmp / f"{k}.parquet"
        pd.DataFrame(r).to_parquet(p, index=False)
        paths[k] = p
    ppl_path = tmp / "ppl.parquet"
    pd.DataFrame(ppl_rows).to_parquet(ppl_path, index=False)
    fx_path = tmp / "forensics.parquet"
    pd.DataFrame(fx_rows).to_parquet(fx_path, index=False)
    tables = analyze(list(paths.values()), REF, ppl_path, fx_path)
    return dict(tmp=tmp, paths=paths, ppl=ppl_path, fx=fx_path, tables=tables, truth=truth, fx_rows=fx_rows)


def test_columns_are_the_contract(world):
    t = world["tables"]
    assert list(t) == list(TABLES)
    for name, cols in TABLES.items():
        assert list(t[name].columns) == cols, name
    assert list(t["match_overall.csv"].columns) == [
        "model",
        "decoder",
        "precision",
        "attention",
        "n",
        "match_rate",
        "ci_low",
        "ci_high",
        "n_errors_excluded",
    ]
    assert list(t["match_by_domain.csv"].columns) == [
        "model",
        "decoder",
        "precision",
        "attention",
        "domain",
        "n",
        "match_rate",
        "ci_low",
        "ci_high",
        "n_errors_excluded",
    ]
    assert list(t["tpf_by_domain.csv"].columns) == [
        "model",
        "decoder",
        "precision",
        "attention",
        "message",
        "max_new_tokens",
        "domain",
        "n",
        "tpf_verify",
        "tpf_verify_ci",
        "tpf_all",
        "tpf_all_ci",
        "tpf_authors",
        "tpf_authors_ci",
        "n_errors_excluded",
    ]
    assert list(t["uncertainty_by_domain.csv"].columns) == UNCERTAINTY_COLUMNS + ["n_errors_excluded"]
    assert list(t["decoders.csv"].columns) == [
        "precision",
        "attention",
        "decoder",
        "model",
        "n",
        "match_rate",
        "ci_low",
        "ci_high",
        "tpf_verify",
        "oracle_match_rate",
        "batch_match_rate",
        "n_tie",
        "n_rounding",
        "n_structural",
        "n_no_verdict",
        "audit",
        "n_errors_excluded",
    ]
    assert all((t[n]["n_errors_excluded"] == 0).all() for n in t if n.endswith(".csv"))
    assert list(t["pairwise_match.csv"].columns) == [
        "a_model",
        "a_decoder",
        "a_precision",
        "a_attention",
        "b_model",
        "b_decoder",
        "b_precision",
        "b_attention",
        "n",
        "match_rate",
        "n_errors_excluded",
    ]
    assert list(t["ppl_by_match.csv"].columns) == [
        "model",
        "decoder",
        "precision",
        "attention",
        "matched",
        "n",
        "mean_ppl",
        "ci_low",
        "ci_high",
        "n_errors_excluded",
    ]
    assert list(t["ppl_logit.csv"].columns) == [
        "model",
        "decoder",
        "precision",
        "attention",
        "n",
        "beta1",
        "ci_low",
        "ci_high",
        "p_value",
        "note",
        "beta0",
        "curve_intercept",
        "fit",
        "n_errors_excluded",
    ]


def test_match_rates_and_trajectories(world):
    t, truth = world["tables"], world["truth"]
    n = len(DOMAINS) * N_PER_DOMAIN
    mo = t["match_overall.csv"].set_index(["decoder", "precision"])
    k = sum(truth.values())
    assert 0.2 * n < k < 0.8 * n  # the construction gives a mixed outcome
    assert mo.loc[("orthrus", "bf16"), "n"] == n
    assert mo.loc[("orthrus", "bf16"), "match_rate"] == pytest.approx(k / n)
    low, high = wilson_ci(k, n)
    assert mo.loc[("orthrus", "bf16"), "ci_low"] == pytest.approx(low)
    assert mo.loc[("orthrus", "bf16"), "ci_high"] == pytest.approx(high)
    assert mo.loc[("orthrus", "fp32"), "match_rate"] == 1.0
    assert mo.loc[("ar", "bf16"), "match_rate"] == 1.0
    assert set(mo.reset_index()["model"]) == {MODEL}  # the reference is not compared with itself

    mbd = t["match_by_domain.csv"]
    bf = mbd[(mbd.decoder == "orthrus") & (mbd.precision == "bf16")].set_index("domain")
    for dom in DOMAINS:
        exp = np.mean([v for p, v in truth.items() if p.startswith(dom)])
        assert bf.loc[dom, "match_rate"] == pytest.approx(exp)
        assert bf.loc[dom, "n"] == N_PER_DOMAIN

    tr = t["trajectories.parquet"]
    o = tr[(tr.decoder == "orthrus") & (tr.precision == "bf16")].set_index("prompt_id")
    assert o["match"].to_dict() == truth
    for r in world["fx_rows"]:  # substitutions
        row = o.loc[r["prompt_id"]]
        assert row["first_divergence"] == r["position"] == row["common_prefix_len"]
        assert row["levenshtein"] == 1
    short = o[o["n_tokens"] == 20]
    assert len(short) and (short["first_divergence"] == 20).all() and (short["levenshtein"] == 4).all()
    assert o.loc[o["match"], "first_divergence"].isna().all()
    assert (o.loc[o["match"], "levenshtein"] == 0).all()
    assert o["ppl"].notna().all()


def test_tpf(world):
    tpf = world["tables"]["tpf_by_domain.csv"]
    assert set(tpf["precision"]) == {"bf16", "fp32"}  # Orthrus decoder only, no AR rows
    fp32 = tpf[tpf.precision == "fp32"].set_index("domain")
    assert list(fp32.index) == DOMAINS + ["all"]
    assert np.allclose(fp32["tpf_verify"], 24 / 6)
    assert np.allclose(fp32["tpf_all"], 24 / 11)
    assert (fp32["tpf_verify_ci"] == 0).all()
    assert fp32.loc["all", "n"] == len(DOMAINS) * N_PER_DOMAIN
    bf = tpf[(tpf.precision == "bf16") & (tpf.domain == "all")].iloc[0]
    tr = world["tables"]["trajectories.parquet"]
    ntok = tr[(tr.decoder == "orthrus") & (tr.precision == "bf16")]["n_tokens"].to_numpy(float)
    assert bf["tpf_verify"] == pytest.approx(np.mean(ntok / 6))
    assert bf["tpf_verify_ci"] > 0
    assert (tpf["message"] == "empty").all() and tpf["max_new_tokens"].isna().all()  # env records without them


def test_tpf_authors_and_a_separate_tpf_run(world, tmp_path):
    """A Table 2 run (256 tokens, user-only message) beside the study's rows; tpf_authors from
    the recorded accepted lengths; a domain key with a space survives."""
    env = json.dumps({"message": "none", "max_new_tokens": 256})
    rows = [
        dict(
            _row(MODEL, "orthrus", "bf16", f"wmt ru-en-{i}", "wmt ru-en", list(range(2, 26)), 5, 5),
            accepted=[3, 4, 5, 6, 1][: 3 + i % 3],
            env=env,
        )
        for i in range(4)
    ]
    path = tmp_path / "tpf.parquet"
    pd.DataFrame(rows).to_parquet(path, index=False)
    t = analysis.analyze(list(world["paths"].values()), REF, tpf_paths=[path])["tpf_by_domain.csv"]
    run = t[(t.message == "none") & (t.domain == "wmt ru-en")].iloc[0]
    expect = [(1 + sum(r["accepted"])) / (1 + len(r["accepted"])) for r in rows]
    assert run["max_new_tokens"] == 256 and run["n"] == 4
    assert run["tpf_authors"] == pytest.approx(np.mean(expect)) and run["tpf_authors_ci"] > 0
    assert len(t[t.message == "empty"]) == len(world["tables"]["tpf_by_domain.csv"])  # study rows unchanged


def test_pairwise(world):
    pw = world["tables"]["pairwise_match.csv"]
    diag = pw[
        (pw.a_model == pw.b_model)
        & (pw.a_decoder == pw.b_decoder)
        & (pw.a_precision == pw.b_precision)
        & (pw.a_attention == pw.b_attention)
    ]
    assert len(diag) == 5 and (diag["match_rate"] == 1.0).all()
    assert len(pw) == 25  # every ordered pair shares all prompts

    def rate(a, b):
        sel = pw[
            (pw.a_model == a[0])
            & (pw.a_decoder == a[1])
            & (pw.a_precision == a[2])
            & (pw.b_model == b[0])
            & (pw.b_decoder == b[1])
            & (pw.b_precision == b[2])
        ]
        assert len(sel) == 1
        return sel["match_rate"].iloc[0]

    # reference bf16 vs fp32 differ on every third prompt (i % 3 == 0: 14 of 40 per domain)
    assert rate((REF, "ar-ref", "bf16"), (REF, "ar-ref", "fp32")) == pytest.approx(26 / 40)
    assert rate((REF, "ar-ref", "fp32"), (REF, "ar-ref", "bf16")) == pytest.approx(26 / 40)
    assert rate((MODEL, "orthrus", "fp32"), (REF, "ar-ref", "fp32")) == 1.0
    assert rate((MODEL, "ar", "bf16"), (REF, "ar-ref", "bf16")) == 1.0


def test_ppl_tables(world):
    t, truth = world["tables"], world["truth"]
    pbm = t["ppl_by_match.csv"]
    bf = pbm[pbm.precision == "bf16"].set_index("matched")
    assert bf.loc[True, "n"] == sum(truth.values())
    assert bf.loc[True, "mean_ppl"] < bf.loc[False, "mean_ppl"]
    assert bf.loc[True, "ci_low"] < bf.loc[True, "mean_ppl"] < bf.loc[True, "ci_high"]
    fp = pbm[pbm.precision == "fp32"].set_index("matched")
    assert fp.loc[False, "n"] == 0 and math.isnan(fp.loc[False, "mean_ppl"])

    lg = t["ppl_logit.csv"].set_index("precision")
    assert lg.loc["bf16", "beta1"] < 0
    assert lg.loc["bf16", "ci_low"] < lg.loc["bf16", "beta1"] < lg.loc["bf16", "ci_high"]
    assert lg.loc["bf16", "p_value"] < 0.01
    assert lg.loc["bf16", "fit"] == "mle"  # the plain fit: the synthetic world does not separate
    # fp32: every trajectory matches -> cannot be estimated, NaN with a note
    assert math.isnan(lg.loc["fp32", "beta1"]) and math.isnan(lg.loc["fp32", "p_value"])
    assert "all matched" in lg.loc["fp32", "note"]


def _logit_df(n, seed, beta=-10.0):
    rng = np.random.default_rng(seed)
    lp = rng.uniform(0, 0.6, n)
    length = rng.integers(20, 129, n)
    dom = rng.choice(["a", "b", "c"], n)
    p = 1 / (1 + np.exp(-(2.5 + beta * lp + 0.002 * (length - 70))))
    return pd.DataFrame(dict(match=rng.random(n) < p, ppl=np.exp(lp), length=length, domain=dom))


def test_logit_recovers_negative_slope():
    fit = fit_ppl_logit(_logit_df(500, 1))
    assert fit["note"] == ""
    assert fit["n"] == 500
    assert -16 < fit["beta1"] < -5
    assert fit["ci_low"] < fit["beta1"] < fit["ci_high"] < 0
    assert fit["p_value"] < 1e-6


def test_logit_curve_is_the_fitted_model_at_the_mean_length_and_domain_mix():
    """ppl_logit.csv's curve, sigmoid(curve_intercept + beta1 log PPL), is the reported model:
    its mean linear predictor over the fitted rows is the model's, it is the model's P(match) at
    the rows' mean length and domain shares for every PPL, and its mean over the rows is close to
    the model's mean predicted probability (which is the observed match rate)."""
    import statsmodels.formula.api as smf

    d = _logit_df(500, 1)
    fit = fit_ppl_logit(d)
    res = smf.logit(
        "match ~ np.log(ppl) + length + C(domain)",
        data=d.assign(match=d["match"].astype(int), length=d["length"].astype(float)),
    ).fit(disp=0)
    assert fit["beta1"] == pytest.approx(res.params["np.log(ppl)"], rel=1e-12)
    assert fit["beta0"] == pytest.approx(res.params["Intercept"], rel=1e-12)
    eta = res.model.exog @ res.params.to_numpy()
    curve = fit["curve_intercept"] + fit["beta1"] * np.log(d["ppl"].to_numpy())
    assert curve.mean() == pytest.approx(eta.mean(), rel=1e-12)
    mean_row = res.model.exog.mean(axis=0)
    j = res.model.exog_names.index("np.log(ppl)")
    for lp in (0.0, 0.3, 0.6):
        x = mean_row.copy()
        x[j] = lp
        assert 1 / (1 + np.exp(-(fit["curve_intercept"] + fit["beta1"] * lp))) == pytest.approx(
            1 / (1 + np.exp(-(x @ res.params.to_numpy()))), rel=1e-12
        )
    p_curve = 1 / (1 + np.exp(-curve))
    assert p_curve.mean() == pytest.approx(res.predict().mean(), abs=0.02)
    assert res.predict().mean() == pytest.approx(d["match"].mean(), abs=1e-6)
    # where beta1 cannot be estimated the curve cannot either
    fit = fit_ppl_logit(d.assign(match=True))
    assert math.isnan(fit["beta0"]) and math.isnan(fit["curve_intercept"])


def test_match_vs_ppl_draws_the_reported_model(world):
    """The figure's curve is ppl_logit.csv's, not a refit: one per estimated configuration."""
    traj, logit = world["tables"]["trajectories.parquet"], world["tables"]["ppl_logit.csv"]
    fig = figures.fig_match_vs_ppl(traj, logit)
    curves = [ln for ln in fig.axes[0].lines if len(ln.get_xdata()) == 200]
    est = logit[logit["curve_intercept"].notna()]
    assert len(est) == 1 and len(curves) == 1  # bf16 estimated; fp32 all matched
    r = est.iloc[0]
    x = np.asarray(curves[0].get_xdata(), float)
    expect = 1 / (1 + np.exp(-(r["curve_intercept"] + r["beta1"] * np.log(x))))
    assert np.allclose(curves[0].get_ydata(), expect, rtol=1e-12, atol=0)
    figures.pyplot().close(fig)
    with pytest.raises(figures.FigureError, match="curve_intercept"):
        figures.fig_match_vs_ppl(traj, logit.drop(columns="curve_intercept"))


def test_logit_cannot_be_estimated():
    d = _logit_df(60, 2)
    for frame, words in [
        (d.assign(match=True), "all matched"),
        (d.assign(match=False), "none matched"),
        (d.head(4), "too few rows"),
        (d.assign(ppl=1.2), "no variance in log(ppl)"),
    ]:
        fit = fit_ppl_logit(frame)
        assert math.isnan(fit["beta1"]) and math.isnan(fit["ci_low"]) and math.isnan(fit["p_value"])
        assert words in fit["note"], (words, fit["note"])
    # perfectly separated by PPL: no plain estimate, Firth's instead (tests/test_ppl_fit.py)
    fit = fit_ppl_logit(d.assign(match=np.log(d["ppl"]) < 0.3))
    assert fit["fit"] == "firth" and fit["beta1"] < 0 and "separation" in fit["note"]
    # a domain whose outcome is constant is dropped, and the fit still runs
    d = _logit_df(400, 3)
    d.loc[d.domain == "c", "match"] = True
    fit = fit_ppl_logit(d)
    assert fit["beta1"] < 0 and "dropped 1 domain" in fit["note"] and fit["n"] < 400
    # constant length: the term is dropped, not a singular fit
    fit = fit_ppl_logit(_logit_df(400, 4).assign(length=128))
    assert fit["beta1"] < 0 and "length constant" in fit["note"]


def test_forensics_summary(world):
    fs = world["tables"]["forensics.csv"]
    assert list(fs.columns) == TABLES["forensics.csv"]
    assert len(fs) == 1
    r = fs.iloc[0]
    rows = world["fx_rows"]
    margins = np.array([x["margin_native"] for x in rows])
    assert r["n_divergences"] == len(rows)
    assert r["median_margin_native"] == pytest.approx(np.median(margins))
    assert r["median_margin_fp32"] == pytest.approx(0.01)
    assert r["frac_exact_tie"] == pytest.approx(np.mean(margins == 0))
    assert r["frac_near_tie"] == pytest.approx(np.mean(margins < 0.125))
    assert r["mode_first_layer"] == 1
    # the threshold is a parameter
    fs2 = forensics_summary(load_forensics(world["fx"]), near_tie=0.01)
    assert fs2.iloc[0]["frac_near_tie"] == pytest.approx(np.mean(margins < 0.01))
    assert fs2.iloc[0]["near_tie_threshold"] == 0.01


def test_missing_column_and_file_errors(world, tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    pd.read_parquet(world["paths"]["orth-bf16"]).drop(columns="tokens").to_parquet(bad)
    with pytest.raises(AnalysisError, match=r"bad\.parquet.*'tokens'"):
        analyze([world["paths"]["ref-bf16"], bad], REF)
    from orthrus.cli import main as orthrus_cli

    rc = orthrus_cli(
        ["analyze", "--decode", str(world["paths"]["ref-bf16"]), str(bad), "--out-dir", str(tmp_path / "t")]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "bad.parquet" in err and "'tokens'" in err and "Traceback" not in err and err.count("\n") == 1
    with pytest.raises(AnalysisError, match="nope.parquet.*does not exist"):
        analyze([tmp_path / "nope.parquet"], REF)
    badppl = tmp_path / "ppl.parquet"
    pd.read_parquet(world["ppl"]).drop(columns="ppl").to_parquet(badppl)
    with pytest.raises(AnalysisError, match=r"perplexity file .*ppl\.parquet.*'ppl'"):
        analyze([world["paths"]["ref-bf16"]], REF, ppl_path=badppl)
    badfx = tmp_path / "fx.parquet"
    pd.read_parquet(world["fx"]).drop(columns="margin_fp32").to_parquet(badfx)
    with pytest.raises(AnalysisError, match=r"forensics file .*fx\.parquet.*'margin_fp32'"):
        analyze([world["paths"]["ref-bf16"]], REF, forensics_path=badfx)
    with pytest.raises(AnalysisError, match="no decoding result with decoder 'ar-ref' and model 'nobody'"):
        analyze([world["paths"]["ref-bf16"], world["paths"]["orth-bf16"]], "nobody")


def test_cli_and_figures(world, tmp_path):
    out = tmp_path / "tables"
    p = world["paths"]
    argv = [
        "--decode",
        *map(str, p.values()),
        "--reference",
        REF,
        "--ppl",
        str(world["ppl"]),
        "--forensics",
        str(world["fx"]),
        "--out-dir",
        str(out),
    ]
    assert analysis.main(argv) == 0
    for name in TABLES:
        assert (out / name).stat().st_size > 0
        if name.endswith(".csv"):
            assert (out / name).with_suffix(".md").exists()
            assert list(pd.read_csv(out / name).columns) == TABLES[name]
    figdir = tmp_path / "figs"
    assert figures.main(["--tables", str(out), "--out-dir", str(figdir)]) == 0
    _check_figures(figdir)


def _check_figures(figdir):
    produced = sorted(x.name for x in figdir.iterdir() if not x.name.startswith("."))
    assert produced == sorted(f.name for f in figures.figure_files(figdir))
    assert len(produced) == 2 * len(figures.FIGURES)
    for f in figures.figure_files(figdir):
        head = f.read_bytes()[:8]
        assert f.stat().st_size > 1000
        assert head.startswith(b"\x89PNG") if f.suffix == ".png" else head.startswith(b"%PDF")


def test_figures_on_empty_inputs(world, tmp_path):
    """fp32 only, no PPL, no forensics: no divergences anywhere, every figure still drawn."""
    p = world["paths"]
    out = tmp_path / "tables"
    assert analysis.main(["--decode", str(p["ref-fp32"]), str(p["orth-fp32"]), "--out-dir", str(out)]) == 0
    assert pd.read_csv(out / "ppl_logit.csv").empty
    assert pd.read_csv(out / "forensics.csv").empty
    figdir = tmp_path / "figs"
    assert figures.main(["--tables", str(out), "--out-dir", str(figdir)]) == 0
    _check_figures(figdir)
    # and with the optional forensics tables absent altogether
    (out / "forensics_rows.parquet").unlink()
    (out / "forensics.csv").unlink()
    assert figures.main(["--tables", str(out), "--out-dir", str(tmp_path / "figs2")]) == 0
    _check_figures(tmp_path / "figs2")


def test_figures_missing_table(tmp_path, capsys):
    from orthrus.cli import main as orthrus_cli

    assert orthrus_cli(["figures", "--tables", str(tmp_path), "--out-dir", str(tmp_path / "f")]) == 2
    assert "trajectories.parquet" in capsys.readouterr().err


def test_survival_curve():
    t, s = figures.survival_curve([None, 2, 0, None], [True, False, False, True], 4)
    assert list(t) == [0, 1, 2, 3, 4]
    assert list(s) == [1.0, 0.75, 0.75, 0.5, 0.5]  # S(t): first t tokens identical


def test_ppl_join_per_precision(world, tmp_path):
    """Perplexities scored at several precisions are joined on precision as well."""
    p = world["paths"]
    base = pd.read_parquet(world["ppl"])
    two = pd.concat([base.assign(precision="bf16", ppl=2.0), base.assign(precision="fp32", ppl=3.0)])
    path = tmp_path / "ppl2.parquet"
    two.to_parquet(path)
    t = analyze([p["ref-bf16"], p["ref-fp32"], p["orth-bf16"], p["orth-fp32"]], REF, ppl_path=path)
    tr = t["trajectories.parquet"]
    assert (tr.loc[tr.precision == "bf16", "ppl"] == 2.0).all()
    assert (tr.loc[tr.precision == "fp32", "ppl"] == 3.0).all()
    two.assign(precision="bf16").to_parquet(path)
    with pytest.raises(AnalysisError, match="several rows per prompt_id/precision"):
        analyze([p["ref-bf16"], p["orth-bf16"]], REF, ppl_path=path)


def test_every_table_counts_the_error_rows_it_excluded(world, tmp_path):
    """One Orthrus bf16 error (a code prompt) and one reference bf16 error (a math prompt)."""
    paths = dict(world["paths"])
    for key, pid in (("orth-bf16", "code-000"), ("ref-bf16", "math-000")):
        df = pd.read_parquet(paths[key])
        df.loc[df.prompt_id == pid, ["finish_reason", "error"]] = ["error", "PromptTooLong: ..."]
        paths[key] = tmp_path / f"{key}.parquet"
        df.to_parquet(paths[key], index=False)
    t = analyze(list(paths.values()), REF, world["ppl"], world["fx"])
    overall = t["match_overall.csv"].set_index(["decoder", "precision"])["n_errors_excluded"]
    assert overall[("orthrus", "bf16")] == 2 and overall[("ar", "bf16")] == 1 and overall[("orthrus", "fp32")] == 0
    by_dom = t["match_by_domain.csv"].query("decoder == 'orthrus' and precision == 'bf16'").set_index("domain")
    assert by_dom["n_errors_excluded"].to_dict() == {"code": 1, "math": 1, "qa": 0}
    tpf = t["tpf_by_domain.csv"].query("precision == 'bf16'").set_index("domain")["n_errors_excluded"]
    assert tpf.to_dict() == {"code": 1, "math": 0, "qa": 0, "all": 1}  # TPF compares with nothing
    pair = t["pairwise_match.csv"]
    both = pair[
        (pair.a_decoder == "orthrus")
        & (pair.a_precision == "bf16")
        & (pair.b_decoder == "ar-ref")
        & (pair.b_precision == "bf16")
    ]
    assert both["n_errors_excluded"].tolist() == [2]
    for name in ("ppl_by_match.csv", "ppl_logit.csv", "forensics.csv"):
        assert (t[name].query("precision == 'bf16'")["n_errors_excluded"] == 2).all(), name


def test_a_domain_whose_every_prompt_errored_stays_in_the_tables(world, tmp_path):
    """Orthrus bf16 errs on every code prompt, the fp32 reference on every qa prompt, the AR view on
    all of its prompts: each cell keeps its row (n 0, no rate) with its error count."""
    paths = dict(world["paths"])
    for key, errs in (
        ("orth-bf16", lambda df: df.domain == "code"),
        ("ref-fp32", lambda df: df.domain == "qa"),
        ("ar-bf16", lambda df: df.domain != ""),
    ):
        df = pd.read_parquet(paths[key])
        df.loc[errs(df), ["finish_reason", "error"]] = ["error", "PromptTooLong: ..."]
        paths[key] = tmp_path / f"{key}.parquet"
        df.to_parquet(paths[key], index=False)
    t = analyze(list(paths.values()), REF, world["ppl"], world["fx"])
    dom = t["match_by_domain.csv"].set_index(["decoder", "precision", "domain"])
    assert dom.loc[("orthrus", "bf16", "code"), "n"] == 0 and math.isnan(
        dom.loc[("orthrus", "bf16", "code"), "match_rate"]
    )
    assert dom.loc[("orthrus", "bf16", "code"), "n_errors_excluded"] == N_PER_DOMAIN
    assert (
        dom.loc[("orthrus", "fp32", "qa"), "n"] == 0
        and dom.loc[("orthrus", "fp32", "qa"), "n_errors_excluded"] == N_PER_DOMAIN
    )
    assert dom.loc[("orthrus", "fp32", "code"), "n"] == N_PER_DOMAIN
    assert list(dom.loc[("orthrus", "bf16")].index) == DOMAINS  # in domain order
    assert {d: int(dom.loc[("ar", "bf16", d), "n_errors_excluded"]) for d in DOMAINS} == {
        d: N_PER_DOMAIN for d in DOMAINS
    }
    overall = t["match_overall.csv"].set_index(["decoder", "precision"])
    assert (
        overall.loc[("ar", "bf16"), "n"] == 0 and overall.loc[("ar", "bf16"), "n_errors_excluded"] == 3 * N_PER_DOMAIN
    )
    tpf = t["tpf_by_domain.csv"].query("decoder == 'orthrus' and precision == 'bf16'").set_index("domain")
    assert (
        list(tpf.index) == DOMAINS + ["all"] and tpf.loc["code", "n"] == 0 and math.isnan(tpf.loc["code", "tpf_verify"])
    )
    assert tpf.loc["code", "n_errors_excluded"] == N_PER_DOMAIN and tpf.loc["all", "n"] == 2 * N_PER_DOMAIN
    assert t["match_by_domain.csv"]["n"].dtype == "int64"


def test_error_counts_of_the_tables_added_with_the_paper_protocol(tmp_path):
    """tpf_by_domain counts per run setting (the separate TPF run's errors only in its own rows);
    uncertainty_by_domain counts the reference's errors at the scored precision/attention, which
    the perplexity forward never saw."""

    def rows(model, decoder, precision, budget, message, error_pid):
        out = []
        for dom in ("code", "math"):
            for i in range(3):
                r = _row(
                    model, decoder, precision, f"{dom}-{i}", dom, [5, 6, 7], *((2, 2) if decoder == "orthrus" else ())
                )
                r["env"] = json.dumps({"message": message, "max_new_tokens": budget})
                if r["prompt_id"] == error_pid:
                    r.update(tokens=[], finish_reason="error", error="PromptTooLong: ...")
                out.append(r)
        return pd.DataFrame(out)

    paths = {}
    for key, args in {
        "ref": (REF, "ar-ref", "fp32", 3, "empty", "math-1"),
        "orth": (MODEL, "orthrus", "fp32", 3, "empty", None),
        "tpf": (MODEL, "orthrus", "fp32", 256, "none", "code-2"),
    }.items():
        paths[key] = tmp_path / f"{key}.parquet"
        rows(*args).to_parquet(paths[key], index=False)
    ppl = tmp_path / "ppl.parquet"
    pd.DataFrame(
        [
            dict(
                model=REF,
                precision="fp32",
                attention="eager",
                prompt_id=f"{d}-{i}",
                domain=d,
                ppl=1.2,
                entropy=0.5,
                margins=[1.0, 2.0],
            )
            for d in ("code", "math")
            for i in range(3)
            if (d, i) != ("math", 1)
        ]
    ).to_parquet(ppl, index=False)
    t = analyze([paths["ref"], paths["orth"]], REF, ppl, tpf_paths=[paths["tpf"]])
    tpf = t["tpf_by_domain.csv"].set_index(["max_new_tokens", "domain"])["n_errors_excluded"].to_dict()
    assert tpf == {(3, "code"): 0, (3, "math"): 0, (3, "all"): 0, (256, "code"): 1, (256, "math"): 0, (256, "all"): 1}
    unc = t["uncertainty_by_domain.csv"].set_index("domain")
    assert unc["n_errors_excluded"].to_dict() == {"code": 0, "math": 1, "all": 1}
    assert unc.loc["math", "n_prompts"] == 2
    # the TPF run's error is in no other table
    assert t["match_overall.csv"]["n_errors_excluded"].tolist() == [1]


def test_uncertainty_by_domain_uses_the_fp32_reference_path(tmp_path):
    rows = []
    for prec, margins in (("fp32", [0.0, 0.1, 0.5, 2.0]), ("bf16", [9.0, 9.0, 9.0, 9.0])):
        for att in ("eager", "sdpa"):
            rows += [
                dict(
                    model=REF,
                    precision=prec,
                    attention=att,
                    prompt_id=f"poetry-en-{i}",
                    domain="poetry-en",
                    ppl=1.5,
                    entropy=1.0,
                    margins=margins,
                )
                for i in range(2)
            ]
            rows.append(
                dict(
                    model=REF,
                    precision=prec,
                    attention=att,
                    prompt_id="math-0",
                    domain="math",
                    ppl=1.0,
                    entropy=0.1 if att == "eager" else 5.0,
                    margins=[3.0, 4.0],
                )
            )
    path = tmp_path / "ppl.parquet"
    pd.DataFrame(rows).to_parquet(path)
    # the authors' domains share names with the tiny world's: its claims only for its own prompts
    assert set(uncertainty_by_domain(path, REF, near_tie=0.125)["declared"]) == {""}
    t = uncertainty_by_domain(path, REF, near_tie=0.125, declared=True)
    assert list(t.columns) == UNCERTAINTY_COLUMNS
    t = t.set_index("domain")
    assert set(t["scored_precision"]) == {"fp32"} and set(t["scored_attention"]) == {"eager"}
    assert t.loc["poetry-en", "n_steps"] == 8 and t.loc["poetry-en", "near_tie_share"] == 0.5
    assert t.loc["poetry-en", "declared"] == "open" and t.loc["math", "declared"] == "determined"
    assert t.loc["math", "near_tie_share"] == 0.0 and t.loc["math", "mean_entropy"] == pytest.approx(0.1)
    assert t.loc["all", "n_prompts"] == 3 and t.loc["all", "near_tie_share"] == pytest.approx(4 / 10)
    assert t.loc["poetry-en", "near_ties_per_prompt"] == 2 and t.loc["all", "near_ties_per_prompt"] == pytest.approx(
        4 / 3
    )
    # an old perplexity file without the uncertainty columns gives an empty table, not an error
    pd.DataFrame(rows).drop(columns=["entropy", "margins"]).to_parquet(path)
    assert uncertainty_by_domain(path, REF).empty


def test_transformers_speculative_decoders_in_every_table_and_the_decoders_figure(world, tmp_path):
    """assisted and prompt-lookup rows on the teacher: match rates, tokens per forward (with the
    draft's forwards in tpf_all, no tpf_authors), ppl tables per decoder, the pairwise matrix and
    the side-by-side decoders table and figure."""
    ref = pd.read_parquet(world["paths"]["ref-bf16"])
    assisted = ref.assign(decoder="assisted", n_verify=11, n_diffusion=30, accepted=[[1] * 12] * len(ref))
    lookup = ref.assign(decoder="prompt-lookup", n_verify=23)
    lookup.loc[0, "tokens"] = [5] * 24  # one divergence
    paths = [*world["paths"].values(), tmp_path / "assisted.parquet", tmp_path / "lookup.parquet"]
    assisted.to_parquet(paths[-2])
    lookup.to_parquet(paths[-1])
    t = analyze(paths, REF, world["ppl"], world["fx"])
    mo = t["match_overall.csv"].set_index(["model", "decoder", "precision"])
    assert mo.loc[(REF, "assisted", "bf16"), "match_rate"] == 1.0
    assert mo.loc[(REF, "prompt-lookup", "bf16"), "n"] == len(ref)
    assert mo.loc[(REF, "prompt-lookup", "bf16"), "match_rate"] == pytest.approx(1 - 1 / len(ref))
    tpf = t["tpf_by_domain.csv"].set_index(["decoder", "domain"])
    assert tpf.loc[("assisted", "all"), "tpf_verify"] == pytest.approx(24 / 12)
    assert tpf.loc[("assisted", "all"), "tpf_all"] == pytest.approx(24 / 42)
    assert (
        math.isnan(tpf.loc[("assisted", "all"), "tpf_authors"])
        and (tpf.loc[("orthrus", "all"), "tpf_authors"] > 0).all()
    )
    assert {"assisted", "prompt-lookup", "orthrus"} <= set(t["ppl_by_match.csv"]["decoder"])
    assert {"assisted", "prompt-lookup"} <= set(t["pairwise_match.csv"]["a_decoder"])
    dec = t["decoders.csv"]
    assert list(dec.columns) == TABLES["decoders.csv"]
    bf = dec[dec.precision == "bf16"]
    assert list(bf["decoder"]) == ["orthrus", "assisted", "prompt-lookup"]  # side by side, study order
    assert bf.set_index("decoder").loc["assisted", "tpf_verify"] == pytest.approx(2.0)
    assert (dec["ci_low"] <= dec["match_rate"]).all() and (dec["match_rate"] <= dec["ci_high"]).all()
    analysis.write_tables(t, tmp_path / "tables")
    written = figures.make_figures(tmp_path / "tables", tmp_path / "figures")
    assert tmp_path / "figures" / "decoders.png" in written


def test_speculative_decoders_error_rows_are_counted_in_their_rows(world, tmp_path):
    """An assisted error row (a prompt too long for the draft, say) is counted in the assisted rows
    of match_overall, tpf_by_domain and decoders.csv, beside the reference's, and nowhere else."""
    ref = pd.read_parquet(world["paths"]["ref-bf16"])
    assisted = ref.assign(decoder="assisted", n_verify=11, n_diffusion=30, accepted=[[1] * 12] * len(ref))
    assisted.loc[assisted.prompt_id == "code-001", ["finish_reason", "error"]] = ["error", "PromptTooLong: ..."]
    lookup = ref.assign(decoder="prompt-lookup", n_verify=23)
    paths = [*world["paths"].values(), tmp_path / "assisted.parquet", tmp_path / "lookup.parquet"]
    assisted.to_parquet(paths[-2])
    lookup.to_parquet(paths[-1])
    t = analyze(paths, REF, world["ppl"], world["fx"])
    dec = t["decoders.csv"].query("precision == 'bf16'").set_index("decoder")
    assert dec["n_errors_excluded"].to_dict() == {"orthrus": 0, "assisted": 1, "prompt-lookup": 0}
    assert dec.loc["assisted", "n"] == len(ref) - 1
    mo = t["match_overall.csv"].set_index(["decoder", "precision"])["n_errors_excluded"]
    assert mo[("assisted", "bf16")] == 1 and mo[("prompt-lookup", "bf16")] == 0
    tpf = t["tpf_by_domain.csv"].query("precision == 'bf16'").set_index(["decoder", "domain"])["n_errors_excluded"]
    assert tpf[("assisted", "code")] == 1 and tpf[("assisted", "all")] == 1 and tpf[("assisted", "qa")] == 0
    assert tpf[("prompt-lookup", "all")] == 0 and tpf[("orthrus", "all")] == 0


def test_a_model_narrowed_by_decode_grids_in_every_table_and_figure(world, tmp_path):
    """decode.grids narrows one Orthrus model to sdpa: the reference and the other model run eager
    and sdpa. Every table holds exactly the cells each model ran (the full-grid model's rows as
    without the narrowed one), and every figure is drawn."""
    p = world["paths"]
    paths = []
    for key, model, attentions in (
        ("ref-bf16", REF, ("eager", "sdpa")),
        ("ref-fp32", REF, ("eager", "sdpa")),
        ("orth-bf16", MODEL, ("eager", "sdpa")),
        ("orth-fp32", MODEL, ("eager", "sdpa")),
        ("ar-bf16", MODEL, ("eager", "sdpa")),
        ("orth-bf16", "narrow", ("sdpa",)),
        ("orth-fp32", "narrow", ("sdpa",)),
    ):
        for att in attentions:
            path = tmp_path / f"{key}-{model}-{att}.parquet"
            pd.read_parquet(p[key]).assign(model=model, attention=att).to_parquet(path, index=False)
            paths.append(path)
    fx = pd.read_parquet(world["fx"])
    fx_path = tmp_path / "forensics.parquet"
    pd.concat([fx, fx.assign(model="narrow", attention="sdpa")]).to_parquet(fx_path, index=False)
    t = analyze(paths, REF, world["ppl"], fx_path)
    cells = lambda df, m: sorted(
        map(tuple, df.loc[df.model == m, ["decoder", "precision", "attention"]].drop_duplicates().values.tolist())
    )
    narrow = [("orthrus", "bf16", "sdpa"), ("orthrus", "fp32", "sdpa")]
    full = sorted(
        (d, pr, a) for d, pr in (("orthrus", "bf16"), ("orthrus", "fp32"), ("ar", "bf16")) for a in ("eager", "sdpa")
    )
    for name in ("match_overall.csv", "match_by_domain.csv", "trajectories.parquet"):
        assert cells(t[name], "narrow") == narrow and cells(t[name], MODEL) == full, name
    for name in ("tpf_by_domain.csv", "ppl_by_match.csv", "ppl_logit.csv", "decoders.csv"):
        assert cells(t[name], "narrow") == narrow, name
        assert cells(t[name], MODEL) == [c for c in full if c[0] == "orthrus"], name
    assert cells(t["forensics.csv"], "narrow") == [narrow[0]]
    pw = t["pairwise_match.csv"]
    assert set(pw.loc[pw.a_model == "narrow", "a_attention"]) == {"sdpa"}
    assert len(pw) == (2 * 2 + 6 + 2) ** 2  # every pair of the 12 decoding results
    # the full-grid model's numbers are those it gets without the narrowed model beside it
    alone = analyze([x for x in paths if "-narrow-" not in x.name], REF, world["ppl"], fx_path)
    for name in ("match_overall.csv", "tpf_by_domain.csv", "ppl_by_match.csv", "decoders.csv"):
        a = alone[name][alone[name].model == MODEL].reset_index(drop=True)
        b = t[name][t[name].model == MODEL].reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b)
    analysis.write_tables(t, tmp_path / "tables")
    assert figures.main(["--tables", str(tmp_path / "tables"), "--out-dir", str(tmp_path / "figs")]) == 0
    _check_figures(tmp_path / "figs")


def test_analyze_fills_the_declared_uncertainty_of_the_tiny_world(world, tmp_path):
    """`orthrus analyze --world-domains` reaches uncertainty_by_domain.csv's `declared` column (an
    engine pair's references, a table of their own, must not take its place)."""
    ppl = pd.read_parquet(world["ppl"]).assign(
        entropy=1.0, margins=[[0.05, 3.0]] * len(pd.read_parquet(world["ppl"])), attention="eager"
    )
    ppl["domain"] = "math"
    path = tmp_path / "ppl.parquet"
    ppl.to_parquet(path)
    for declared, want in ((True, "determined"), (False, "")):
        t = analyze(list(world["paths"].values()), REF, path, world["fx"], declared=declared)[
            "uncertainty_by_domain.csv"
        ]
        assert t.set_index("domain").loc["math", "declared"] == want


def test_speed_is_read_from_the_rows_own_seconds(world):
    """speed.csv from `orthrus analyze`: the decoding files' `seconds` reach it (each row 0.01 s),
    every cell beside the reference at its precision and kernel on the same prompts."""
    s = world["tables"]["speed.csv"]
    ref = s[(s["decoder"] == "ar-ref") & (s["precision"] == "bf16")].iloc[0]
    assert ref.tokens_per_second == pytest.approx(24 / 0.01) and ref.speedup == 1
    o = s[(s["decoder"] == "orthrus") & (s["precision"] == "bf16")].iloc[0]
    assert o.tokens_per_second == pytest.approx(o.tokens / (o.n * 0.01))
    assert o.speedup == pytest.approx(o.tokens_per_second / ref.tokens_per_second) and o.speedup <= 1
