"""claims.csv (`orthrus claims`) on the committed run's tables and on constructed ones, and
`orthrus compare-runs` between runs whose verdicts agree and runs whose verdicts differ."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from orthrus import contracts, stats
from orthrus.errors import InputError
from orthrus.report import claims, compare_runs
from orthrus.stats import paired_stderr, tost_paired

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "docs" / "results"


def _copy(tmp_path, name="run") -> Path:
    """The committed run's tables without its claims.csv (a test changes the tables, and a run
    that predates claims.csv has its claims computed from them)."""
    out = tmp_path / name
    shutil.copytree(RUN, out)
    for f in ("claims.csv", "claims.md"):
        (out / f).unlink(missing_ok=True)
    return out


def _get(df, claim, subject):
    rows = df[(df["claim"] == claim) & (df["subject"] == subject)]
    assert len(rows) == 1, (claim, subject, df[["claim", "subject"]].values.tolist())
    return rows.iloc[0]


def test_claims_of_the_committed_run_come_from_its_tables():
    df = claims.claims_table(RUN)
    assert list(df.columns) == contracts.CLAIMS_COLUMNS and set(df["verdict"]) <= set(contracts.CLAIM_VERDICTS)
    # every claim, but tf32-exact: the default decodes no tf32 cell, and a claim about none makes no row
    assert list(dict.fromkeys(df["claim"])) == [c for c in claims.CLAIMS if c != "tf32-exact"]
    mo = pd.read_csv(RUN / "match_overall.csv").set_index(contracts.CONFIG)
    fp32 = mo.xs("fp32", level="precision")
    r = _get(df, "fp32-exact", "every fp32 cell")
    assert r.statistic == fp32["match_rate"].min() and (r.statistic < 1 or r.verdict == "holds")
    worst = fp32.sort_values("match_rate").iloc[0]
    assert r.ci_low == pytest.approx(stats.wilson_ci(round(worst.match_rate * worst.n), int(worst.n))[0])
    # per decoder and model, on the kernel where it parts most surely
    r = _get(df, "bf16-inexact", "ce-k8/orthrus/bf16")
    bf16 = mo.loc[("ce-k8", "orthrus", "bf16")]
    kernel = bf16["match_rate"].idxmin()
    assert r.statistic == bf16.loc[kernel, "match_rate"] and f"({kernel})" in r.statistic_name
    assert r.ci_high == bf16.loc[kernel, "ci_high"] and r.verdict == ("holds" if r.ci_high < 1 else "fails")
    # Table 6's coefficient as the table has it (no second fit), held at the claims' alpha
    lg = pd.read_csv(RUN / "ppl_logit.csv").set_index(contracts.CONFIG)
    for model in ("ce-k8", "kl-k8"):
        r = _get(df, "beta1-negative", f"{model}/orthrus/bf16/sdpa")
        want = lg.loc[(model, "orthrus", "bf16", "sdpa")]
        assert (r.statistic, r.ci_low, r.ci_high, r.p_value) == (want.beta1, want.ci_low, want.ci_high, want.p_value)
        assert r.verdict == ("holds" if want.beta1 < 0 and want.p_value < 0.05 else "fails")
    r = _get(df, "ppl-higher-when-diverging", "ce-k8/orthrus/bf16/sdpa")
    pm = pd.read_csv(RUN / "ppl_by_match.csv").set_index(contracts.CONFIG + ["matched"])["mean_ppl"]
    key = ("ce-k8", "orthrus", "bf16", "sdpa")
    assert r.statistic == pytest.approx(pm.loc[(*key, False)] - pm.loc[(*key, True)])
    assert r.verdict == ("holds" if r.ci_low > 0 else "fails") and r.ci_low < r.statistic < r.ci_high
    # Table 7: the paired TOST holds exactly where it rejects; enough documents that one changed
    # answer cannot decide it; corpus chrF has no per-document score
    bench = df[df["claim"] == "benchmarks-equivalent"]
    tested = bench[bench["verdict"] != "untestable"]
    assert len(tested) and (tested["verdict"] == tested["p_value"].lt(0.05).map({True: "holds", False: "fails"})).all()
    assert (tested["n"] >= 100).all()
    # the default's tasks (benchmarks.tiny_tasks), each tested for both variants
    tasks = set(bench["subject"].str.extract(r"teacher/ar: (\w+) ")[0])
    assert tasks == set(yaml.safe_load((ROOT / "config.yaml").read_text())["benchmarks"]["tiny_tasks"])
    assert all(_get(df, "benchmarks-equivalent", s).verdict == "holds" for s in bench["subject"])
    assert not df["subject"].str.contains("strict-match").any()  # primary metrics only
    # in ulps of the decoding precision, from forensics.csv
    fx = pd.read_csv(RUN / "forensics.csv").set_index(contracts.CONFIG)
    r = _get(df, "divergence-at-near-tie", "ce-k8/orthrus/bf16/sdpa")
    row = fx.loc[("ce-k8", "orthrus", "bf16", "sdpa")]
    assert r.n == row.n_divergences > 0 and r.statistic == row.frac_within_ulps
    assert r.verdict == ("holds" if row.frac_within_ulps == 1 else "fails")
    # the planted bug runs in the default and is caught
    assert set(df.loc[df["claim"] == "planted-bug-caught", "verdict"]) == {"holds"}


def test_the_benchmark_claim_is_a_paired_tost_on_the_same_documents(tmp_path):
    """The agreement table's per-document difference and standard error give the TOST of the
    per-document scores themselves, in points."""
    run = _copy(tmp_path)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 200).astype(float)
    b = np.where(rng.random(200) < 0.02, 1 - a, a)
    ag = pd.read_csv(run / "benchmarks_agreement.csv")
    row = (ag["model"] == "ce-k8") & (ag["task"] == "tiny_code")
    ag.loc[row, ["n", "paired_diff", "paired_stderr"]] = [200, float(np.mean(a - b)), paired_stderr(a, b)]
    ag.to_csv(run / "benchmarks_agreement.csv", index=False)
    for margin in (2.0, 5.0):
        r = _get(
            claims.claims_table(run, claims.Settings(equivalence_margin=margin)),
            "benchmarks-equivalent",
            "ce-k8/orthrus/bf16/sdpa vs teacher/ar: tiny_code exact_match,none",
        )
        want = tost_paired(a * 100, b * 100, margin)
        assert (r.statistic, r.ci_low, r.ci_high, r.p_value) == pytest.approx(
            (want.diff, want.ci_low, want.ci_high, want.p_value)
        )
        assert r.verdict == ("holds" if want.p_value < 0.05 else "fails") and r.n == 200
    # a table written before paired_diff existed: the score difference stands in for it
    qa = (ag["model"] == "kl-k8") & (ag["task"] == "tiny_qa")
    ag.loc[qa, "score_diff"] = 0.013
    ag.drop(columns="paired_diff").to_csv(run / "benchmarks_agreement.csv", index=False)
    assert _get(
        claims.claims_table(run), "benchmarks-equivalent", "kl-k8/orthrus/bf16/sdpa vs teacher/ar: tiny_qa acc,none"
    ).statistic == pytest.approx(1.3)


def test_constructed_tables_fail_and_untestable_claims_say_why(tmp_path):
    run = _copy(tmp_path)
    mo = pd.read_csv(run / "match_overall.csv")
    mo.loc[(mo.model == "kl-k8") & (mo.precision == "fp32"), "match_rate"] = 0.99
    mo.to_csv(run / "match_overall.csv", index=False)
    pd.read_csv(run / "forensics.csv").iloc[:0].to_csv(run / "forensics.csv", index=False)
    # a metric without per-document scores (corpus chrF: paired columns empty) cannot be tested
    ag = pd.read_csv(run / "benchmarks_agreement.csv")
    ag.loc[ag["task"] == "tiny_code", ["paired_diff", "paired_stderr"]] = np.nan
    ag.to_csv(run / "benchmarks_agreement.csv", index=False)
    r = _get(
        claims.claims_table(run),
        "benchmarks-equivalent",
        "ce-k8/orthrus/bf16/sdpa vs teacher/ar: tiny_code exact_match,none",
    )
    assert r.verdict == "untestable" and "corpus-level" in r.reason
    (run / "benchmarks_agreement.csv").unlink()  # benchmarks off: no claim over them
    df = claims.claims_table(run)
    r = _get(df, "fp32-exact", "every fp32 cell")
    assert r.verdict == "fails" and r.statistic == 0.99 and "kl-k8/orthrus/fp32/sdpa 0.990" in r.reason
    assert _get(df, "divergence-at-near-tie", "every configuration").reason == "no divergences"
    assert "benchmarks-equivalent" not in set(df["claim"])
    (run / "ppl_logit.csv").unlink()
    assert _get(claims.claims_table(run), "beta1-negative", "every bf16 cell").reason == "no ppl_logit.csv"
    with pytest.raises(InputError, match="not a tables directory"):
        claims.claims_table(tmp_path / "nowhere")


def test_orthrus_claims_writes_the_table_and_its_markdown_twin(tmp_path, capsys):
    run = _copy(tmp_path)
    assert claims.main(["--tables", str(run), "--equivalence-margin", "5"]) == 0
    df = pd.read_csv(run / "claims.csv")
    assert list(df.columns) == contracts.CLAIMS_COLUMNS and (run / "claims.md").exists()
    assert df["test"].str.contains("H0: \\|difference\\| >= 5 points").any()
    assert f"{len(df)} claims" in capsys.readouterr().err
    read, computed = claims.load_or_compute(run)
    assert not computed and len(read) == len(df) and read["reason"].map(type).eq(str).all()
    from orthrus.cli import main as cli

    assert cli(["claims", "--tables", str(run), "--alpha", "0.7"]) == 2


def _seed_run(tmp_path) -> Path:
    """The committed run as another seed might give it: other numbers, the same findings."""
    run = _copy(tmp_path, "seed1")
    mo = pd.read_csv(run / "match_overall.csv")
    bf = (mo.precision == "bf16") & (mo.attention == "sdpa")
    mo.loc[bf, "match_rate"] -= 0.04
    mo.loc[bf, ["ci_low", "ci_high"]] -= 0.04
    mo.to_csv(run / "match_overall.csv", index=False)
    lg = pd.read_csv(run / "ppl_logit.csv")
    lg[["beta1", "ci_low", "ci_high"]] *= 1.2
    lg["p_value"] /= 2
    lg.to_csv(run / "ppl_logit.csv", index=False)
    return run


def test_compare_runs_agrees_across_seeds_and_names_a_differing_verdict(tmp_path, capsys):
    other = _seed_run(tmp_path)
    claims.main(["--tables", str(other)])  # B has its claims.csv, A none: computed from its tables
    capsys.readouterr()
    old = _copy(tmp_path, "old")
    assert compare_runs.main([str(old), str(other)]) == 0
    out = capsys.readouterr().out
    assert "(A: no claims.csv, claims computed from its tables)" in out and "0 verdict(s) differ" in out
    line = next(x for x in out.splitlines() if x.startswith("bf16-inexact") and "ce-k8/orthrus/bf16 " in x)
    r = pd.read_csv(old / "match_overall.csv").set_index(contracts.CONFIG).loc[("ce-k8", "orthrus", "bf16", "sdpa")]
    shown = [compare_runs._stat(r.match_rate - d, r.ci_low - d, r.ci_high - d) for d in (0, 0.04)]
    assert all(s in line for s in shown) and " yes " in line and "agree" in line
    # a run whose claims differ: bf16 kl-k8 exact, and beta1 not significant
    bad = _copy(tmp_path, "bad")
    mo = pd.read_csv(bad / "match_overall.csv")
    mo.loc[
        (mo.model == "kl-k8") & (mo.decoder == "orthrus") & (mo.precision == "bf16"),
        ["match_rate", "ci_low", "ci_high"],
    ] = [1.0, 0.98, 1.0]
    mo.to_csv(bad / "match_overall.csv", index=False)
    lg = pd.read_csv(bad / "ppl_logit.csv")
    lg.loc[lg.model == "kl-k8", "p_value"] = 0.2
    lg.to_csv(bad / "ppl_logit.csv", index=False)
    assert compare_runs.main([str(RUN), str(bad)]) == 1
    out = capsys.readouterr().out
    differ = [x for x in out.splitlines() if x.endswith("DIFFER")]
    assert len(differ) == 2 and "2 verdict(s) differ" in out
    exact = next(x for x in differ if x.startswith("bf16-inexact"))
    assert "kl-k8/orthrus/bf16" in exact and "holds" in exact and "fails" in exact and "1 [0.98, 1]" in exact
    assert any(x.startswith("beta1-negative") and "kl-k8" in x for x in differ)


def test_compare_runs_claims_one_run_lacks(tmp_path, capsys):
    run = _copy(tmp_path)
    mo = pd.read_csv(run / "match_overall.csv")
    mo[mo.decoder != "prompt-lookup"].to_csv(run / "match_overall.csv", index=False)
    assert compare_runs.main([str(RUN), str(run)]) == 1
    out = capsys.readouterr().out
    assert any("teacher/prompt-lookup/bf16 " in x and "absent" in x and x.endswith("DIFFER") for x in out.splitlines())
    assert compare_runs.main([str(RUN), str(run), "--common"]) == 0
    m = compare_runs.compare(claims.claims_table(RUN), claims.claims_table(run), common=True)
    assert m["agree"].all() and m["overlap"].isin([True, None]).all()
    assert compare_runs.overlap((0.1, 0.2), (0.2, 0.3)) and not compare_runs.overlap((0.1, 0.2), (0.25, 0.3))
    assert compare_runs.overlap((math.nan, math.nan), (0.1, 0.2)) is None


def test_the_verdict_claims_read_decoders_csv(tmp_path):
    """divergences-are-numerics fails on a structural or unexplained divergence of a lossless
    decoder; planted-bug-caught holds where the planted decoder diverged and was called not
    lossless, fails where the audit missed it, and is untestable where it did not diverge."""
    run = _copy(tmp_path)
    base = dict(
        attention="sdpa",
        n=10,
        ci_low=0.5,
        ci_high=0.9,
        tpf_verify=2.0,
        oracle_match_rate=0.8,
        batch_match_rate=1.0,
        n_errors_excluded=0,
    )
    rows = [
        dict(
            base,
            precision="bf16",
            decoder="orthrus",
            model="m",
            match_rate=0.8,
            n_tie=1,
            n_rounding=1,
            n_structural=0,
            n_no_verdict=0,
            audit="numerics, within its oracle",
        ),
        dict(
            base,
            precision="bf16",
            decoder="prompt-lookup",
            model="teacher",
            match_rate=0.7,
            n_tie=1,
            n_rounding=1,
            n_structural=1,
            n_no_verdict=0,
            audit="not lossless",
        ),
        dict(
            base,
            precision="fp32",
            decoder="orthrus-lossy",
            model="m",
            match_rate=0.6,
            n_tie=0,
            n_rounding=0,
            n_structural=4,
            n_no_verdict=0,
            audit="not lossless",
        ),
        dict(
            base,
            precision="bf16",
            decoder="orthrus-lossy",
            model="m",
            match_rate=0.9,
            n_tie=0,
            n_rounding=1,
            n_structural=0,
            n_no_verdict=0,
            audit="numerics",
        ),
        dict(
            base,
            precision="fp32",
            attention="eager",
            decoder="orthrus-lossy",
            model="m",
            match_rate=1.0,
            n_tie=0,
            n_rounding=0,
            n_structural=0,
            n_no_verdict=0,
            audit="exact",
        ),
    ]
    pd.DataFrame(rows).to_csv(run / "decoders.csv", index=False)
    df = claims.claims_table(run)
    assert _get(df, "divergences-are-numerics", "m/orthrus/bf16/sdpa").verdict == "holds"
    r = _get(df, "divergences-are-numerics", "teacher/prompt-lookup/bf16/sdpa")
    assert r.verdict == "fails" and r.statistic == 1 and "1 structural" in r.reason
    assert len(df[df.claim == "divergences-are-numerics"]) == 2  # the planted decoder is no lossless decoder
    assert _get(df, "planted-bug-caught", "m/orthrus-lossy/fp32/sdpa").verdict == "holds"
    assert _get(df, "planted-bug-caught", "m/orthrus-lossy/bf16/sdpa").verdict == "fails"
    assert _get(df, "planted-bug-caught", "m/orthrus-lossy/fp32/eager").verdict == "untestable"
    (run / "decoders.csv").unlink()
    df = claims.claims_table(run)
    assert _get(df, "planted-bug-caught", "orthrus-lossy").verdict == "untestable"


def test_the_near_tie_claim_is_in_ulps_of_the_decoding_precision(tmp_path):
    """A margin of 0.125 is one bf16 ulp at logits in [16, 32) and sixteen at [1, 2): the claim
    counts the divergences within analysis.rounding_ulps ulps, whatever their absolute margin."""
    from orthrus.analysis.uncertainty import forensics_summary
    from orthrus.audit.verdict import gap_ulps

    run = _copy(tmp_path)
    base = dict(
        model="m",
        decoder="orthrus",
        precision="bf16",
        attention="sdpa",
        domain="x",
        first_layer_diverging=1,
        verdict="rounding",
        verdict_note="",
        margin_fp32=0.01,
    )
    # (reference logit of its token, of the decoder's): 1 ulp at 16.75, 2 ulps at 16.75, 0 (a tie)
    pairs = [(16.75, 16.625), (16.75, 16.5), (3.0, 3.0)]
    rows = [
        base | dict(prompt_id=f"p{i}", position=3, margin_native=a - b, gap_ulps=gap_ulps(a, b, "bf16"))
        for i, (a, b) in enumerate(pairs)
    ]
    assert [r["gap_ulps"] for r in rows] == [1.0, 2.0, 0.0]
    fs = forensics_summary(pd.DataFrame(rows), near_tie=0.125, rounding_ulps=2.0)
    fs.to_csv(run / "forensics.csv", index=False)
    r = _get(claims.claims_table(run), "divergence-at-near-tie", "m/orthrus/bf16/sdpa")
    # the absolute threshold would fail two of three (margins 0.125 and 0.25 are not below 0.125)
    assert fs.iloc[0]["frac_near_tie"] == pytest.approx(1 / 3)
    assert r.verdict == "holds" and r.statistic == 1.0 and r.n == 3 and "within 2 ulps" in r.test
    # at 1 ulp the 2-ulp divergence is outside rounding, and the reason says by how much
    forensics_summary(pd.DataFrame(rows), rounding_ulps=1.0).to_csv(run / "forensics.csv", index=False)
    r = _get(claims.claims_table(run), "divergence-at-near-tie", "m/orthrus/bf16/sdpa")
    assert r.verdict == "fails" and r.reason == "1 of 3 divergences at a margin of more than 1 ulps (largest 2)"
    # a table written before the ulps columns cannot be judged in ulps
    fs.drop(columns=["rounding_ulps", "frac_within_ulps"]).to_csv(run / "forensics.csv", index=False)
    assert (
        "predates its margins in ulps"
        in _get(claims.claims_table(run), "divergence-at-near-tie", "every configuration").reason
    )


def test_fp32_exact_allows_rare_roundings_at_ties_only(tmp_path):
    """fp32 carries 16 more bits than bf16, not infinitely many: a cell that parts on few prompts,
    each within the verdicts' fp32 bound (analysis.rounding_ulps.fp32), is exact up to fp32's
    rounding; a cell that parts often, or once by more than rounding, is not."""
    from orthrus.analysis.uncertainty import forensics_summary

    run = _copy(tmp_path)
    mo = pd.read_csv(run / "match_overall.csv")
    cell = (mo.model == "ce-k8") & (mo.decoder == "orthrus") & (mo.precision == "fp32") & (mo.attention == "sdpa")
    lo, hi = stats.wilson_ci(191, 192)
    mo.loc[cell, ["match_rate", "ci_low", "ci_high"]] = [191 / 192, lo, hi]
    mo.to_csv(run / "match_overall.csv", index=False)
    base = dict(
        model="ce-k8",
        decoder="orthrus",
        precision="fp32",
        attention="sdpa",
        domain="x",
        prompt_id="p",
        position=5,
        first_layer_diverging=1,
        margin_native=2e-6,
        margin_fp32=2e-6,
        verdict_note="",
    )
    fx = pd.read_csv(run / "forensics.csv")
    fx = fx[~((fx.model == "ce-k8") & (fx.decoder == "orthrus") & (fx.precision == "fp32"))]

    def with_fp32_row(gap, verdict):
        row = forensics_summary(pd.DataFrame([base | dict(gap_ulps=gap, verdict=verdict)])).assign(
            **{contracts.ERRORS: 0}
        )
        pd.concat([fx, row], ignore_index=True).to_csv(run / "forensics.csv", index=False)
        return _get(claims.claims_table(run), "fp32-exact", "every fp32 cell")

    r = with_fp32_row(5.0, "rounding")  # as the committed run's one fp32 divergence before the fp32 bound: 5 ulps
    assert r.verdict == "holds" and r.statistic == 191 / 192
    assert "ce-k8/orthrus/fp32/sdpa 0.995" in r.reason and "1 divergence(s), each within 64 fp32 ulps" in r.reason
    r = with_fp32_row(80.0, "structural")
    assert r.verdict == "fails" and "not every one of its 1 divergences is a rounding" in r.reason
    fx.to_csv(run / "forensics.csv", index=False)  # no forensics row: rounding cannot be told from a loss
    assert "has no forensics row" in _get(claims.claims_table(run), "fp32-exact", "every fp32 cell").reason
    lo, hi = stats.wilson_ci(180, 192)  # parting often is not exact, whatever the margins
    mo.loc[cell, ["match_rate", "ci_low", "ci_high"]] = [180 / 192, lo, hi]
    mo.to_csv(run / "match_overall.csv", index=False)
    r = with_fp32_row(1.0, "rounding")
    assert r.verdict == "fails" and "Wilson lower bound below 0.95" in r.reason


def test_tf32_cells_get_their_own_claim_and_fp32_says_what_tf32_did(tmp_path):
    """A study with `tf32` cells (fp32 with TF32 products allowed) gets `tf32-exact`, fp32's test on
    them, and fp32-exact's reason names the lowest tf32 cell; a tf32 cell parting on a quarter of its
    prompts fails the claim while fp32's verdict is untouched."""
    run = _copy(tmp_path)
    mo = pd.read_csv(run / "match_overall.csv")
    tf32 = mo[mo["precision"] == "fp32"].copy()
    tf32["precision"] = "tf32"
    worst = tf32.index[0]
    tf32.loc[worst, ["match_rate", "ci_low", "ci_high"]] = [0.75, 0.55, 0.88]
    pd.concat([mo, tf32]).to_csv(run / "match_overall.csv", index=False)
    before = _get(claims.claims_table(RUN), "fp32-exact", "every fp32 cell")
    df = claims.claims_table(run)
    r = _get(df, "tf32-exact", "every tf32 cell")
    assert r.statistic == 0.75 and r.verdict == "fails" and "Wilson lower bound below" in r.reason
    fp32 = _get(df, "fp32-exact", "every fp32 cell")
    assert fp32.verdict == before.verdict and fp32.statistic == before.statistic
    w = tf32.loc[worst]
    assert f"TF32 off here: with TF32 products allowed (tf32-exact, {len(tf32)} cells)" in fp32.reason
    assert f"{w.model}/{w.decoder}/tf32/{w.attention} 0.750" in fp32.reason
