"""`orthrus claims`: the study's verdict in one table, each claim tested on the run's own tables.

    orthrus claims --tables results/tables [--alpha 0.05] [--equivalence-margin 2]
                   [--out results/tables/claims.csv]

One row per claim and subject (a decoding configuration, a benchmark task): the statistic, its
interval, the test, the threshold and a verdict, `holds`, `fails` or `untestable` (with the
reason, e.g. too few divergences). Every statistic is read from, or computed once from, a table
`orthrus analyze` or `orthrus lm-eval table` already wrote (`source`): nothing is refitted, so a
claim and the table it rests on cannot disagree.

- `fp32-exact` (Table 8): every lossless decoder on every kernel emits the AR reference's tokens
  in fp32, up to fp32's own rounding: a cell that parts does so on few prompts (Wilson lower
  bound >= `FP32_FLOOR`), each at a reference margin within the verdicts' fp32 bound
  (`analysis.rounding_ulps.fp32` ulps, forensics);
  the statistic is the lowest fp32 match rate, with its Wilson interval; its reason says what
  allowing TF32 did where the study has `tf32` cells.
- `tf32-exact`: `fp32-exact`'s test on the `tf32` cells (fp32 with TF32 products allowed), where
  the study has any.
- `bf16-inexact` (Tables 3-4), per bf16 speculative decoder and model: the Wilson 95% upper
  bound of the match rate is below 1 on the kernel where it is lowest.
- `ppl-higher-when-diverging` (Table 5), per bf16 speculative configuration: the reference
  response's mean perplexity is higher on diverging than on matching prompts (Welch's test from
  the table's means and t intervals; holds when the interval of the difference lies above 0).
- `beta1-negative` (Table 6): the log-PPL coefficient of the table's logistic fit is negative with
  p < alpha.
- `benchmarks-equivalent` (Table 7), per run and task (primary metric): the paired per-document
  score difference against its AR reference, on the same documents, is equivalent to 0 within
  +-margin points (two one-sided tests, `orthrus.stats.tost`; a 0-1 score counts 100 points);
  `fails` means equivalence is not shown, which is not a loss either. A corpus-level metric
  (chrF) has no per-document score: untestable.
- `divergence-at-near-tie` (forensics), per configuration with divergences: at every first
  divergence the reference ranks its token above the decoder's by at most the precision's
  `rounding_ulps` ulps of the two logits' magnitude in the decoding precision (the unit in which rounding parts two
  logits: a fixed margin in logits, e.g. 0.125, is one bf16 ulp at 16 and eight at 2); the
  share below the absolute near-tie threshold stays in forensics.csv as a statistic.

- `divergences-are-numerics` (decoders.csv), per lossless decoder cell that diverged: every
  first divergence is a `tie` or a `rounding` (orthrus.audit.verdict), none structural or unexplained.
- `sampling-lossless-fp32`, `sampling-tv-bf16`, `planted-sampler-bias-caught` (sampling_tv.csv,
  sampling_two_sample.csv; docs/SAMPLING.md): the sampled loop's per-position TV against single-step
  sampling at fp32 rounding and no two-sample rejection in fp32; the bf16 TV bound for a response of
  the study's length (holds when bf16 lifts the mean TV ten times above fp32's); the planted biased
  sampler rejected on most prompts and 100 times the honest TV. Untestable when the audit is off.
- `planted-bug-caught` (decoders.csv), per cell of the planted `orthrus-lossy` control: the audit
  says `not lossless` (untestable where it did not run or did not diverge).

A claim is a function of the tables directory in `CLAIMS` (id -> description, source table,
function). `load_or_compute` reads a run's `claims.csv`, or computes it from the tables of
a run that predates it (`orthrus compare-runs`, `orthrus summary`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from orthrus.contracts import CLAIM_VERDICTS, CLAIMS_COLUMNS, CONFIG, ERRORS, PRIMARY_METRICS, SPECULATIVE
from orthrus.errors import InputError
from orthrus.io import write_table
from orthrus.stats import tost, welch, wilson_ci

HOLDS, FAILS, UNTESTABLE = VERDICTS = CLAIM_VERDICTS
# The decoders that are lossless in exact arithmetic, whose tokens the claims say something about.
# A decoder added to the study joins the claims here (a deliberately lossy one stays out).
LOSSLESS = ("orthrus", "ar", "assisted", "prompt-lookup", "oracle", "ar-batched")
# the planted bug the audit must catch (orthrus.contracts.CONTROLS)
PLANTED = "orthrus-lossy"
# the precision of the inexactness claims (Tables 3-6): the follow-up paper's
REDUCED = "bf16"
# lm-eval metrics already on a 0-100 scale; every other score is a 0-1 share (x 100 points)
HUNDRED_SCALE = ("chrf", "bleu", "ter")
DEFAULT_MARGIN = 2.0
# fp32-exact allows a cell to part at rounding ties on few prompts only: bf16 parts on dozens of
# percent, so "exact up to fp32's rounding" keeps the claim's contrast with bf16
FP32_FLOOR = 0.95
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA  # level of the p-value tests (beta1, Welch, TOST)
    equivalence_margin: float = DEFAULT_MARGIN  # TOST margin, in points of the benchmark's score


class Claim(NamedTuple):
    description: str
    source: str  # the table its statistics come from
    rows: Callable  # (tables directory, Settings) -> list of row dicts


def _read(tables: Path, name: str) -> pd.DataFrame | None:
    path = tables / name
    return pd.read_csv(path) if path.exists() else None


def _cell(r) -> str:
    return "/".join(str(r[c]) for c in CONFIG)


def _errors(df: pd.DataFrame) -> int:
    return int(df[ERRORS].sum()) if ERRORS in df.columns and len(df) else 0


def _row(
    claim: str,
    subject: str,
    statistic_name: str = "",
    statistic=math.nan,
    ci=(math.nan, math.nan),
    n=None,
    test: str = "",
    threshold: str = "",
    p_value=math.nan,
    verdict: str = UNTESTABLE,
    reason: str = "",
    errors: int = 0,
) -> dict:
    c = CLAIMS[claim]
    return {
        "claim": claim,
        "subject": subject,
        "description": c.description,
        "source": c.source,
        "statistic_name": statistic_name,
        "statistic": float(statistic),
        "ci_low": float(ci[0]),
        "ci_high": float(ci[1]),
        "n": n,
        "test": test,
        "threshold": threshold,
        "p_value": float(p_value),
        "verdict": verdict,
        "reason": reason,
        ERRORS: int(errors),
    }


def _missing(claim: str, subject: str, why: str) -> list[dict]:
    return [_row(claim, subject, reason=why)]


def _lossless(df: pd.DataFrame, precision: str, speculative: bool = False) -> pd.DataFrame:
    keep = [d for d in LOSSLESS if not speculative or d in SPECULATIVE]
    return df[df["decoder"].isin(keep) & (df["precision"] == precision)]


def fp32_exact(tables: Path, s: Settings) -> list[dict]:
    return _exact(tables, "fp32-exact", "fp32")


def tf32_exact(tables: Path, s: Settings) -> list[dict]:
    """fp32's claim on the cells that allow TF32 products; no row where the study has none."""
    mo = _read(tables, "match_overall.csv")
    if mo is None or _lossless(mo, "tf32").empty:
        return []
    return _exact(tables, "tf32-exact", "tf32")


def _exact(tables: Path, claim: str, precision: str) -> list[dict]:
    """Every lossless cell at `precision` matches, up to the precision's own rounding."""
    subject = f"every {precision} cell"
    mo = _read(tables, "match_overall.csv")
    if mo is None:
        return _missing(claim, subject, "no match_overall.csv")
    d = _lossless(mo, precision).sort_values(["match_rate", *CONFIG], kind="stable")
    if d.empty:
        return _missing(claim, subject, f"no {precision} decoding results")
    worst = d.iloc[0]
    below = d[d["match_rate"] < 1.0]
    reason = (
        f"below 1: {', '.join(f'{_cell(r)} {r.match_rate:.3f}' for _, r in below.iterrows())}"
        if len(below)
        else f"{len(d)} cells, lowest: {_cell(worst)}"
    )
    rounding = _fp32_roundings(tables, below, precision)
    if len(below):
        reason += f"; {rounding[1]}"
    tf32 = _lossless(mo, "tf32").sort_values(["match_rate", *CONFIG], kind="stable")
    if precision == "fp32" and len(tf32):  # what allowing TF32 does to fp32's exactness
        w = tf32.iloc[0]
        reason += f"; TF32 off here: with TF32 products allowed (tf32-exact, {len(tf32)} cells) the lowest is "
        reason += f"{_cell(w)} {w.match_rate:.3f}"
    return [
        _row(
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
            errors=_errors(d),
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
            f"{', '.join(_cell(r) for _, r in below[~rare].iterrows())}: Wilson lower bound below {FP32_FLOOR:g}",
        )
    fx = _read(tables, "forensics.csv")
    if fx is None or "frac_within_ulps" not in fx.columns:
        return False, "no forensics.csv with margins in ulps to tell rounding from a loss"
    fx = fx.set_index(CONFIG)
    parts = []
    for _, r in below.iterrows():
        key = tuple(r[c] for c in CONFIG)
        if key not in fx.index:
            return False, f"{_cell(r)} has no forensics row"
        f = fx.loc[key]
        n, k = int(f["n_divergences"]), float(f["rounding_ulps"])
        if not (f["frac_within_ulps"] == 1 and f["n_structural"] == 0 and f["n_no_verdict"] == 0):
            return (
                False,
                f"{_cell(r)}: not every one of its {n} divergences is a rounding within {k:g} {precision} ulps",
            )
        parts.append(
            f"{_cell(r)}: {n} divergence(s), each within {k:g} {precision} ulps (largest {float(f['max_gap_ulps']):g})"
        )
    return True, "; ".join(parts)


def bf16_inexact(tables: Path, s: Settings) -> list[dict]:
    """Per bf16 speculative decoder and model, over the kernels it ran: the claim holds where some
    kernel's Wilson upper bound is below 1 (on a CPU one kernel can be bit-exact between a verify
    block and a single step: the reason names the kernels that matched everywhere)."""
    mo = _read(tables, "match_overall.csv")
    if mo is None:
        return _missing("bf16-inexact", f"every {REDUCED} cell", "no match_overall.csv")
    d = _lossless(mo, REDUCED, speculative=True)
    if d.empty:
        return _missing("bf16-inexact", f"every {REDUCED} cell", f"no {REDUCED} speculative decoding results")
    out = []
    for (model, decoder), g in d.groupby(["model", "decoder"], sort=True):
        r = g.sort_values(["ci_high", "attention"]).iloc[0]  # the kernel that parts the most surely
        below = r["match_rate"] < 1.0 and r["ci_high"] < 1.0
        exact = [
            f"{a} ({int(n)} of {int(n)} matched)" for a, n, m in zip(g["attention"], g["n"], g["match_rate"]) if m == 1
        ]
        out.append(
            _row(
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


def _t_stderr(mean: float, high: float, n: int) -> float:
    """The standard error behind a two-sided 95% t interval's upper bound (`orthrus.stats.t_ci`)."""
    from scipy import stats as st

    if n < 2 or math.isnan(high):
        return math.nan
    return (high - mean) / float(st.t.ppf(0.975, n - 1))


def ppl_higher(tables: Path, s: Settings) -> list[dict]:
    pm = _read(tables, "ppl_by_match.csv")
    if pm is None:
        return _missing("ppl-higher-when-diverging", f"every {REDUCED} cell", "no ppl_by_match.csv")
    out = []
    d = _lossless(pm, REDUCED, speculative=True)
    for key, g in d.groupby(CONFIG, sort=True):
        subject = "/".join(map(str, key))
        by = dict(zip(g["matched"].astype(str) == "True", g.itertuples()))
        div, mat = by.get(False), by.get(True)
        n_div, n_mat = (int(x.n) if x is not None else 0 for x in (div, mat))
        test = "Welch's t-test, mean reference PPL of diverging minus matching prompts (95% CI)"
        if min(n_div, n_mat) < 2:
            out.append(
                _row(
                    "ppl-higher-when-diverging",
                    subject,
                    n=n_div + n_mat,
                    test=test,
                    threshold="CI > 0",
                    reason=f"too few {'diverging' if n_div < 2 else 'matching'} prompts ({min(n_div, n_mat)})",
                    errors=_errors(g),
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
            _row(
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
                _errors(g),
            )
        )
    return out


def beta1_negative(tables: Path, s: Settings) -> list[dict]:
    lg = _read(tables, "ppl_logit.csv")
    if lg is None:
        return _missing("beta1-negative", f"every {REDUCED} cell", "no ppl_logit.csv")
    out = []
    test = "logit P(match) = b0 + b1 log PPL + b2 length + domain, Wald test of b1"
    for _, r in _lossless(lg, REDUCED, speculative=True).iterrows():
        beta, p = float(r["beta1"]), float(r["p_value"])
        if math.isnan(beta) or math.isnan(p):
            note = r.get("note")
            out.append(
                _row(
                    "beta1-negative",
                    _cell(r),
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
            _row(
                "beta1-negative",
                _cell(r),
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


def points(metric: str) -> float:
    """Points per unit of an lm-eval metric ("name,filter"): 1 for a 0-100 metric, 100 for a share."""
    return 1.0 if metric.partition(",")[0] in HUNDRED_SCALE else 100.0


def _primary(tables: Path, ag: pd.DataFrame) -> pd.Series:
    """Which agreement rows are their task's primary metric (benchmarks.csv's flag, else the index)."""
    bench = _read(tables, "benchmarks.csv")
    if bench is not None and "primary" in bench.columns:
        keys = ["model", "decoder", "precision", "attention", "task", "metric"]
        flags = {tuple(k): bool(p) for k, p in zip(bench[keys].astype(str).values.tolist(), bench["primary"])}
        return pd.Series([flags.get(tuple(k), False) for k in ag[keys].astype(str).values.tolist()], index=ag.index)
    return pd.Series([m in PRIMARY_METRICS.get(t, []) for t, m in zip(ag["task"], ag["metric"])], index=ag.index)


def benchmarks_equivalent(tables: Path, s: Settings) -> list[dict]:
    ag = _read(tables, "benchmarks_agreement.csv")
    if ag is None:  # the benchmarks are off (benchmarks.enabled: false): no claim to test
        return []
    out = []
    m, alpha = s.equivalence_margin, s.alpha
    for _, r in ag[_primary(tables, ag)].iterrows():
        subject = (
            f"{r['model']}/{r['decoder']}/{r['precision']}/{r['attention']} vs "
            f"{r['reference_model']}/{r['reference_decoder']}: {r['task']} {r['metric']}"
        )
        scale, n = points(str(r["metric"])), int(r["n"])
        test = f"paired TOST on the same {n} documents, H0: |difference| >= {m:g} points ({1 - 2 * alpha:.0%} CI)"
        mean = r["paired_diff"] if "paired_diff" in r.index else r["score_diff"]
        se = r["paired_stderr"]
        if pd.isna(se) or pd.isna(mean):
            out.append(
                _row(
                    "benchmarks-equivalent",
                    subject,
                    n=n,
                    test=test,
                    threshold=f"+-{m:g} points",
                    reason=f"no per-document score for {r['metric']} (a corpus-level metric)",
                )
            )
            continue
        t = tost(float(mean) * scale, float(se) * scale, n, -m, m, alpha)
        if math.isnan(t.p_value):
            out.append(
                _row(
                    "benchmarks-equivalent",
                    subject,
                    n=n,
                    test=test,
                    threshold=f"+-{m:g} points",
                    reason=f"too few documents ({n})",
                )
            )
            continue
        ok = t.p_value < alpha
        reason = (
            ""
            if ok
            else (f"equivalence not shown: the interval [{t.ci_low:.2f}, {t.ci_high:.2f}] is not inside +-{m:g} points")
        )
        out.append(
            _row(
                "benchmarks-equivalent",
                subject,
                "mean paired score difference (points)",
                t.diff,
                (t.ci_low, t.ci_high),
                n,
                test,
                f"+-{m:g} points",
                t.p_value,
                HOLDS if ok else FAILS,
                reason,
            )
        )
    return out


def divergence_at_near_tie(tables: Path, s: Settings) -> list[dict]:
    fx = _read(tables, "forensics.csv")
    if fx is None:
        return _missing("divergence-at-near-tie", "every configuration", "no forensics.csv")
    fx = fx[fx["decoder"].isin(LOSSLESS)]
    if fx.empty:
        return _missing("divergence-at-near-tie", "every configuration", "no divergences")
    if "frac_within_ulps" not in fx.columns:
        return _missing(
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
                _row(
                    "divergence-at-near-tie",
                    _cell(r),
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
            _row(
                "divergence-at-near-tie",
                _cell(r),
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
    dec = _read(tables, "decoders.csv")
    return None if dec is None or "audit" not in dec.columns else dec


def divergences_are_numerics(tables: Path, s: Settings) -> list[dict]:
    """Per lossless decoder cell that diverged: every first divergence has the verdict `tie` or
    `rounding` (orthrus.audit.verdict; none `structural`, none without a verdict)."""
    dec = _decoders(tables)
    if dec is None:
        return _missing("divergences-are-numerics", "every configuration", "no verdicts in decoders.csv")
    d = dec[dec["decoder"].isin(LOSSLESS) & (dec["match_rate"] < 1)]
    if d.empty:
        return _missing("divergences-are-numerics", "every configuration", "no divergences")
    out = []
    for _, r in d.iterrows():
        n = int(r["n_tie"] + r["n_rounding"] + r["n_structural"] + r["n_no_verdict"])
        ok = r["n_structural"] == 0 and r["n_no_verdict"] == 0
        out.append(
            _row(
                "divergences-are-numerics",
                _cell(r),
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
        return _missing("planted-bug-caught", PLANTED, f"{PLANTED} did not run (decode.controls)")
    out = []
    for _, r in d.iterrows():
        diverged = r["match_rate"] < 1
        caught = r["audit"] == "not lossless"
        out.append(
            _row(
                "planted-bug-caught",
                _cell(r),
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


# ---- lossless in distribution (orthrus/audit/sampling.py)
SAMPLING_TV = "sampling_tv.csv"
SAMPLING_TEST = "sampling_two_sample.csv"
# fp32's rounding moves a per-position TV by ~1e-7 to ~1e-5 (a few ulps of the largest
# probabilities); a TV above 1e-4 would be something other than rounding
FP32_TV_CEILING = 1e-4
# "orders of magnitude": the planted control's mean TV at least this times the honest loop's
PLANTED_TV_FACTOR = 100.0


def _sampling(tables: Path):
    tv, test = _read(tables, SAMPLING_TV), _read(tables, SAMPLING_TEST)
    return tv, test


def sampling_lossless_fp32(tables: Path, s: Settings) -> list[dict]:
    """The honest sampled loop in fp32: every cell's largest per-position TV at rounding level
    (below FP32_TV_CEILING) and no prompt's two-sample test rejected after Holm's correction."""
    tv, test = _sampling(tables)
    if tv is None:
        return _missing("sampling-lossless-fp32", "orthrus fp32", "the sampling audit did not run (sampling.enabled)")
    cells = tv[(tv["decoder"] == "orthrus") & (tv["precision"] == "fp32")]
    if cells.empty:
        return _missing("sampling-lossless-fp32", "orthrus fp32", "no fp32 cell in sampling_tv.csv")
    worst = float(cells["tv_max"].max())
    honest = (
        test[(test["decoder"] == "orthrus") & (test["precision"] == "fp32")] if test is not None else pd.DataFrame()
    )
    rejected = int(honest["rejected"].sum()) if len(honest) else 0
    reason = f"largest per-position TV {worst:.2g} over {int(cells['n_positions'].sum())} positions; " + (
        f"{rejected} of {len(honest)} prompts rejected by the two-sample test (Holm, family-wise "
        f"{honest['alpha'].iloc[0]:g}), {int((honest['p_value'] < honest['alpha']).sum())} below alpha "
        "uncorrected"
        if len(honest)
        else "no two-sample test ran (sampling.two_sample)"
    )
    verdict = HOLDS if worst < FP32_TV_CEILING and rejected == 0 else FAILS
    return [
        _row(
            "sampling-lossless-fp32",
            "orthrus fp32",
            "largest per-position TV",
            worst,
            n=int(cells["n_positions"].sum()),
            test="analytic TV vs single-step sampling; two-sample chi-square",
            threshold=f"TV < {FP32_TV_CEILING:g} and no Holm rejection",
            verdict=verdict,
            reason=reason,
        )
    ]


def sampling_tv_bf16(tables: Path, s: Settings) -> list[dict]:
    """Per bf16 cell of the honest sampled loop: its bound on the TV of a response of the study's
    length, and whether bf16 moves it above fp32's rounding (its mean TV at least ten times the
    fp32 cell's with the same kernel, temperature and top-p)."""
    tv, _ = _sampling(tables)
    if tv is None:
        return _missing("sampling-tv-bf16", "orthrus bf16", "the sampling audit did not run (sampling.enabled)")
    honest = tv[tv["decoder"] == "orthrus"]
    key = ["attention", "temperature", "top_p"]
    fp32 = honest[honest["precision"] == "fp32"].set_index(key)["tv_mean"]
    out = []
    for _, r in honest[honest["precision"] == REDUCED].iterrows():
        subject = f"{r['model']}/orthrus/{REDUCED}/{r['attention']} T={r['temperature']:g} top_p={r['top_p']:g}"
        base = fp32.get(tuple(r[k] for k in key))
        bound = float(r["bound_at_length"])
        meaning = (
            f"a {int(r['length'])}-token response's distribution is within TV {bound:.3g} of the AR model's "
            f"(mean per-position TV {r['tv_mean']:.2g} x {int(r['length'])}; the sum along the "
            f"{int(r['n_trajectories'])} reference trajectories averages {r['seq_bound']:.3g}); n sampled responses "
            f"are within n x TV, so a test needs at least 0.5 / TV = {0.5 / max(bound, 1e-300):.3g} of them to "
            f"gain a power of 0.5 over its level (this is a bound: the real TV may be smaller)"
        )
        verdict = UNTESTABLE if base is None else (HOLDS if r["tv_mean"] > 10 * base else FAILS)
        out.append(
            _row(
                "sampling-tv-bf16",
                subject,
                "TV bound at the study's length",
                bound,
                n=int(r["n_positions"]),
                test="mean per-position TV x length (chain rule)",
                threshold="bf16 mean TV > 10 x fp32's",
                verdict=verdict,
                reason=meaning if base is not None else "no fp32 cell to compare with",
            )
        )
    return out or _missing("sampling-tv-bf16", "orthrus bf16", "no bf16 cell in sampling_tv.csv")


def planted_sampler_bias_caught(tables: Path, s: Settings) -> list[dict]:
    """The planted biased sampler (orthrus-lossy sampled): the two-sample test rejects it on most
    prompts (Holm), and its analytic mean TV stands PLANTED_TV_FACTOR times above the honest
    loop's in every fp32 cell where the bug acts (temperature != 1)."""
    tv, test = _sampling(tables)
    if tv is None or test is None:
        return _missing("planted-sampler-bias-caught", PLANTED, "the sampling audit did not run (sampling.enabled)")
    planted = test[test["decoder"] == PLANTED]
    key = ["precision", "attention", "temperature", "top_p"]
    acts = tv[(tv["temperature"] != 1.0) & (tv["precision"] == "fp32")]
    ratio = acts[acts["decoder"] == PLANTED].set_index(key)["tv_mean"] / acts[acts["decoder"] == "orthrus"].set_index(
        key
    )["tv_mean"].clip(lower=1e-300)
    if planted.empty or ratio.empty:
        return _missing("planted-sampler-bias-caught", PLANTED, "no planted two-sample test or fp32 cell at T != 1")
    rejected, n = int(planted["rejected"].sum()), len(planted)
    low = float(ratio.min())
    verdict = HOLDS if rejected > n / 2 and low >= PLANTED_TV_FACTOR else FAILS
    return [
        _row(
            "planted-sampler-bias-caught",
            PLANTED,
            "prompts rejected",
            rejected,
            n=n,
            test="two-sample chi-square per prompt, Holm; analytic TV ratio planted / honest",
            threshold=f"most prompts rejected and TV ratio >= {PLANTED_TV_FACTOR:g}",
            verdict=verdict,
            reason=f"{rejected} of {n} prompts rejected; the planted mean TV is {low:.3g} times the honest "
            f"loop's or more ({len(ratio)} fp32 cells at T != 1)",
        )
    ]


CLAIMS: dict[str, Claim] = {
    "fp32-exact": Claim(
        "fp32: every lossless decoder on every kernel emits the AR reference's tokens, up to "
        "fp32's own rounding at ties (Table 8)",
        "match_overall.csv",
        fp32_exact,
    ),
    "tf32-exact": Claim(
        "fp32 with TF32 products allowed (many users' setting): every lossless decoder emits the AR "
        "reference's tokens, up to its rounding; no row without tf32 cells. TF32 rounds a product's inputs "
        "to 10 mantissa bits on CUDA GPUs (Ampere and later) and is ignored by CPU kernels, so on a CPU these "
        "cells are fp32's",
        "match_overall.csv",
        tf32_exact,
    ),
    "bf16-inexact": Claim(
        "bf16: the speculative decoder does not always emit the AR reference's tokens (Tables 3-4)",
        "match_overall.csv",
        bf16_inexact,
    ),
    "ppl-higher-when-diverging": Claim(
        "bf16: diverging prompts had a less certain reference, a higher mean perplexity of its response (Table 5)",
        "ppl_by_match.csv",
        ppl_higher,
    ),
    "beta1-negative": Claim(
        "bf16: the match probability falls with the reference's log perplexity, beta1 < 0 (Table 6)",
        "ppl_logit.csv",
        beta1_negative,
    ),
    "benchmarks-equivalent": Claim(
        "no systematic loss on the benchmarks: the score equals the AR reference's "
        "within the equivalence margin (Table 7)",
        "benchmarks_agreement.csv",
        benchmarks_equivalent,
    ),
    "divergence-at-near-tie": Claim(
        "every divergence happens where the reference's two logits tie within rounding: "
        "at most analysis.rounding_ulps ulps apart in the decoding precision (forensics)",
        "forensics.csv",
        divergence_at_near_tie,
    ),
    "divergences-are-numerics": Claim(
        "every divergence of a lossless decoder is a tie or a rounding of its own "
        "verify pass, none structural (this project's verdicts)",
        "decoders.csv",
        divergences_are_numerics,
    ),
    "planted-bug-caught": Claim(
        "the audit flags the planted lossy decoder `not lossless` (negative control)",
        "decoders.csv",
        planted_bug_caught,
    ),
    "sampling-lossless-fp32": Claim(
        "fp32, sampled: the speculative loop samples from the AR model's distribution up "
        "to fp32 rounding, and no two-sample test tells them apart",
        SAMPLING_TV,
        sampling_lossless_fp32,
    ),
    "sampling-tv-bf16": Claim(
        "bf16, sampled: the speculative loop's distribution parts from single-step sampling "
        "by the measured TV bound (for a response of the study's length)",
        SAMPLING_TV,
        sampling_tv_bf16,
    ),
    "planted-sampler-bias-caught": Claim(
        "the two-sample test rejects the planted biased sampler on most prompts, "
        "and its analytic TV stands orders of magnitude above the honest loop's "
        "(negative control)",
        SAMPLING_TEST,
        planted_sampler_bias_caught,
    ),
}


def claims_table(tables, settings: Settings = Settings()) -> pd.DataFrame:
    """Every claim of CLAIMS tested on the tables in `tables` (a directory)."""
    tables = Path(tables)
    if not tables.is_dir():
        raise InputError(f"{tables} is not a tables directory")
    rows = [r for c in CLAIMS.values() for r in c.rows(tables, settings)]
    df = pd.DataFrame(rows, columns=CLAIMS_COLUMNS)
    df["n"] = pd.array(df["n"], dtype="Int64")
    df[ERRORS] = pd.array(df[ERRORS], dtype="int64")
    return df


def load_or_compute(tables, settings: Settings = Settings()) -> tuple[pd.DataFrame, bool]:
    """(a run's claims, whether they were computed here): its `claims.csv`, or, for a run that has
    none (one that predates the table), the claims computed from its tables with `settings`."""
    path = Path(tables) / "claims.csv"
    if path.exists():
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])
        missing = [c for c in CLAIMS_COLUMNS if c not in df.columns]
        if missing:
            raise InputError(f"{path} lacks column(s) {', '.join(missing)}")
        for c in ("description", "statistic_name", "test", "threshold", "reason", "subject"):
            df[c] = df[c].fillna("").astype(str)
        return df, False
    return claims_table(tables, settings), True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus claims", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", required=True, help="a tables directory (orthrus analyze, orthrus lm-eval table)")
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="level of the p-value tests")
    ap.add_argument(
        "--equivalence-margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="TOST margin of the benchmark claim, in points (a 0-1 score counts 100 points)",
    )
    ap.add_argument("--out", help="CSV, with a Markdown twin (default: TABLES/claims.csv)")
    args = ap.parse_args(argv)
    if not 0 < args.alpha < 0.5:
        raise InputError(f"--alpha must lie in (0, 0.5), got {args.alpha}")
    if not args.equivalence_margin > 0:
        raise InputError(f"--equivalence-margin must be positive, got {args.equivalence_margin}")
    df = claims_table(args.tables, Settings(args.alpha, args.equivalence_margin))
    out = Path(args.out) if args.out else Path(args.tables) / "claims.csv"
    write_table(df, out)
    counts = df["verdict"].value_counts()
    print(
        f"[claims] {len(df)} claims: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + f" -> {out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
