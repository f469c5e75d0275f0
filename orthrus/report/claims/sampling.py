"""Lossless in distribution (orthrus/audit/sampling.py): fp32 at rounding, bf16 bounded, the
planted sampler caught."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orthrus.decoders import DIFFUSION_DECODER, PLANTED
from orthrus.report.claims.base import (
    FAILS,
    HOLDS,
    REDUCED,
    UNDERPOWERED,
    UNTESTABLE,
    Settings,
    claim_row,
    missing_row,
    read_table,
)

# ---- lossless in distribution (orthrus/audit/sampling.py)
SAMPLING_TV = "sampling_tv.csv"

SAMPLING_TEST = "sampling_two_sample.csv"

# fp32's rounding moves a per-position TV by ~1e-7 to ~1e-5 (a few ulps of the largest
# probabilities); a TV above 1e-4 would be something other than rounding
FP32_TV_CEILING = 1e-4

# "orders of magnitude": the planted control's mean TV at least this times the honest loop's
PLANTED_TV_FACTOR = 100.0


def _sampling(tables: Path):
    tv, test = read_table(tables, SAMPLING_TV), read_table(tables, SAMPLING_TEST)
    return tv, test


def sampling_lossless_fp32(tables: Path, s: Settings) -> list[dict]:
    """The honest sampled loop in fp32: every cell's largest per-position TV at rounding level
    (below FP32_TV_CEILING) and no prompt's two-sample test rejected after Holm's correction."""
    tv, test = _sampling(tables)
    if tv is None:
        return missing_row(
            "sampling-lossless-fp32", "orthrus fp32", "the sampling audit did not run (sampling.enabled)"
        )
    cells = tv[(tv["decoder"] == DIFFUSION_DECODER) & (tv["precision"] == "fp32")]
    if cells.empty:
        return missing_row("sampling-lossless-fp32", "orthrus fp32", "no fp32 cell in sampling_tv.csv")
    worst = float(cells["tv_max"].max())
    honest = (
        test[(test["decoder"] == DIFFUSION_DECODER) & (test["precision"] == "fp32")]
        if test is not None
        else pd.DataFrame()
    )
    rejected = int(honest["rejected"].sum()) if len(honest) else 0
    known = int(honest["rejected_known"].sum()) if "rejected_known" in honest else 0
    reason = f"largest per-position TV {worst:.2g} over {int(cells['n_positions'].sum())} positions; " + (
        f"{rejected} of {len(honest)} prompts rejected by the two-sample test and {known} by the "
        f"known-probability test (Holm, family-wise {honest['alpha'].iloc[0]:g}), "
        f"{int((honest['p_value'] < honest['alpha']).sum())} below alpha uncorrected"
        if len(honest)
        else "no two-sample test ran (sampling.two_sample)"
    )
    verdict = HOLDS if worst < FP32_TV_CEILING and rejected == 0 and known == 0 else FAILS
    return [
        claim_row(
            "sampling-lossless-fp32",
            "orthrus fp32",
            "largest per-position TV",
            worst,
            n=int(cells["n_positions"].sum()),
            test="analytic TV vs single-step sampling; two-sample chi-square; known-probability goodness of fit",
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
        return missing_row("sampling-tv-bf16", "orthrus bf16", "the sampling audit did not run (sampling.enabled)")
    honest = tv[tv["decoder"] == DIFFUSION_DECODER]
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
            claim_row(
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
    return out or missing_row("sampling-tv-bf16", "orthrus bf16", "no bf16 cell in sampling_tv.csv")


def planted_sampler_bias_caught(tables: Path, s: Settings) -> list[dict]:
    """The planted biased sampler (orthrus-lossy sampled): rejected on every prompt tested (Holm over
    its prompts), by the known-probability test where the run has it (orthrus/audit/known_p.py: its N
    planned for that), else by the two-sample test on most prompts; and its analytic mean TV stands
    PLANTED_TV_FACTOR times above the honest loop's in every fp32 cell where the bug acts (T != 1).
    A prompt missed where its planned power was short makes the claim `underpowered`, not `fails`."""
    tv, test = _sampling(tables)
    if tv is None or test is None:
        return missing_row("planted-sampler-bias-caught", PLANTED, "the sampling audit did not run (sampling.enabled)")
    planted = test[test["decoder"] == PLANTED]
    key = ["precision", "attention", "temperature", "top_p"]
    acts = tv[(tv["temperature"] != 1.0) & (tv["precision"] == "fp32")]
    honest = acts[acts["decoder"] == DIFFUSION_DECODER].set_index(key)["tv_mean"]
    ratio = acts[acts["decoder"] == PLANTED].set_index(key)["tv_mean"] / honest.clip(lower=1e-300)
    if planted.empty or ratio.empty:
        return missing_row("planted-sampler-bias-caught", PLANTED, "no planted two-sample test or fp32 cell at T != 1")
    n, low = len(planted), float(ratio.min())
    chi2 = int(planted["rejected"].sum())
    if "p_known" in planted and planted["p_known"].notna().all():
        missed = planted[~planted["rejected_known"].astype(bool)]
        caught, test_name = n - len(missed), "known-probability stratified goodness of fit per prompt, Holm"
        short = missed[missed["planned_power"] < s.sampled_power]
        verdict = HOLDS if missed.empty else (UNDERPOWERED if len(short) == len(missed) else FAILS)
        threshold = "every prompt rejected and TV ratio >= "
        said = (
            f"{caught} of {n} prompts rejected by the known-probability test (planned power "
            f"{planted['planned_power'].min():.3g} or more at N = {planted['n_samples'].min()}-"
            f"{planted['n_samples'].max()}), {chi2} by the two-sample test"
        )
        if len(short):
            said += f"; missed where the planned power was short: {', '.join(short['prompt_id'])}"
    else:  # a run from before the known-probability test
        caught, test_name = chi2, "two-sample chi-square per prompt, Holm"
        verdict = HOLDS if chi2 > n / 2 else FAILS
        threshold = "most prompts rejected and TV ratio >= "
        said = f"{chi2} of {n} prompts rejected"
    if low < PLANTED_TV_FACTOR:
        verdict = FAILS
    return [
        claim_row(
            "planted-sampler-bias-caught",
            PLANTED,
            "prompts rejected",
            caught,
            n=n,
            test=f"{test_name}; analytic TV ratio planted / honest",
            threshold=f"{threshold}{PLANTED_TV_FACTOR:g}",
            verdict=verdict,
            reason=f"{said}; the planted mean TV is {low:.3g} times the honest loop's or more ({len(ratio)} fp32 "
            "cells at T != 1)",
        )
    ]
