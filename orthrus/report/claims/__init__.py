"""`orthrus claims`: the study's verdict in one table, each claim tested on the run's own tables.

    orthrus claims --tables results/tables [--alpha 0.05] [--equivalence-margin 2] [--power JSON]
                   [--out results/tables/claims.csv]

One row per claim and subject (a decoding configuration, a benchmark task): the statistic, its
interval, the test, the threshold and a verdict, `holds`, `fails`, `untestable` (with the
reason, e.g. too few divergences) or `underpowered` (the config's power plan, `analysis.power`, gives
the claim's test too little power at the cell's n: orthrus/report/claims/power.py). Every statistic is read from, or computed once from, a table
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
  p < alpha: the plain fit's Wald test, or, where the plain fit separates (the table's `fit` is
  `firth`), Firth's penalised likelihood-ratio test.
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
  sampling at fp32 rounding and no rejection in fp32 by either test (two-sample, known-probability);
  the bf16 TV bound for a response of the study's length (holds when bf16 lifts the mean TV ten times
  above fp32's); the planted biased sampler rejected on every prompt by the known-probability test,
  whose N is planned for it (`underpowered` where a prompt it missed had its power capped by
  sampling.two_sample.n_samples_max), and 100 times the honest TV. Untestable when the audit is off.
- `planted-bug-caught` (decoders.csv), per cell of the planted `orthrus-lossy` control: the audit
  says `not lossless` (untestable where it did not run or did not diverge).
- `verdicts-machine-invariant`, `planted-machine-caught` (verdicts_by_env.csv, machine_probes.csv;
  `orthrus compare-envs`, docs/MACHINES.md): no claim's verdict differs between the numerical
  environments (CPU kind, thread count) a study ran; and the comparison fails, naming the claim,
  when one verdict is flipped in every environment whose bf16 product bytes differ from the first's.
  Untestable on one environment.
- `load-invariant`, `planted-load-caught` (load.csv; docs/ENGINES.md "Under load"), per server run at
  concurrency > 1: its greedy output equals the same server's at concurrency 1 up to ties and rounding
  (every first divergence a tie or rounding by the server's own log-probabilities); the planted proxy,
  which samples a greedy request whenever another is in flight, shows a structural divergence.

A claim is a function of the tables directory in `CLAIMS` (id -> description, source table,
function). `load_or_compute` reads a run's `claims.csv`, or computes it from the tables of
a run that predates it (`orthrus compare-runs`, `orthrus summary`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from orthrus.config import read_section
from orthrus.contracts import CLAIMS_COLUMNS, ERRORS
from orthrus.errors import InputError
from orthrus.io import write_table
from orthrus.report.claims import power
from orthrus.report.claims.base import DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_SETTINGS, VERDICTS, Settings, read_table
from orthrus.report.claims.benchmarks import benchmarks_equivalent
from orthrus.report.claims.exactness import bf16_inexact, fp32_exact, tf32_exact
from orthrus.report.claims.load_invariance import load_invariant, planted_load_caught
from orthrus.report.claims.machine import INVARIANT, PLANTED, VERDICTS_BY_ENV, machine_invariant, planted_machine_caught
from orthrus.report.claims.perplexity import beta1_negative, ppl_higher
from orthrus.report.claims.sampling import (
    SAMPLING_TEST,
    SAMPLING_TV,
    planted_sampler_bias_caught,
    sampling_lossless_fp32,
    sampling_tv_bf16,
)
from orthrus.report.claims.verdicts import divergence_at_near_tie, divergences_are_numerics, planted_bug_caught


class Claim(NamedTuple):
    description: str
    source: str  # the table its statistics come from
    rows: Callable  # (tables directory, Settings) -> list of row dicts


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
        "the audit rejects the planted biased sampler on every prompt tested (the known-probability "
        "test, at the N planned for it), and its analytic TV stands orders of magnitude above the honest "
        "loop's (negative control)",
        SAMPLING_TEST,
        planted_sampler_bias_caught,
    ),
    "load-invariant": Claim(
        "a server's greedy output with other requests in flight equals its output at concurrency 1, up to ties "
        "and rounding (verdicts from its own log-probabilities)",
        "load.csv",
        load_invariant,
    ),
    "planted-load-caught": Claim(
        "the audit finds a structural divergence in the planted server that samples a greedy request whenever "
        "another is in flight (negative control)",
        "load.csv",
        planted_load_caught,
    ),
    INVARIANT: Claim(
        "every claim's verdict is the same under every numerical environment run (CPU kind and thread "
        "count, docs/MACHINES.md)",
        VERDICTS_BY_ENV,
        machine_invariant,
    ),
    PLANTED: Claim(
        "the machine comparison fails when one verdict follows the machine's arithmetic: flipped in every "
        "environment whose bf16 product bytes differ from the first's (negative control)",
        VERDICTS_BY_ENV,
        planted_machine_caught,
    ),
}


def claims_table(tables, settings: Settings = DEFAULT_SETTINGS) -> pd.DataFrame:
    """Every claim of CLAIMS tested on the tables in `tables` (a directory)."""
    tables = Path(tables)
    if not tables.is_dir():
        raise InputError(f"{tables} is not a tables directory")
    rows = [
        r | {"description": c.description, "source": c.source}
        for c in CLAIMS.values()
        for r in c.rows(tables, settings)
    ]
    df = pd.DataFrame(rows, columns=CLAIMS_COLUMNS)
    if plan := power.pilots(settings.power):
        sizes = power.cell_sizes(read_table(tables, "match_overall.csv"))
        df = power.apply(df, plan, sizes, settings.alpha, settings.power.target)
    df["n"] = pd.array(df["n"], dtype="Int64")
    df[ERRORS] = pd.array(df[ERRORS], dtype="int64")
    return df


def load_or_compute(tables, settings: Settings = DEFAULT_SETTINGS) -> tuple[pd.DataFrame, bool]:
    """(a run's claims, whether they were computed here): its `claims.csv`, or, for a run that has
    none (one that predates the table), the claims computed from its tables with `settings`."""
    path = Path(tables) / "claims.csv"
    if path.exists():
        return read_claims(path), False
    return claims_table(tables, settings), True


def read_claims(path) -> pd.DataFrame:
    """A claims.csv as `orthrus claims` wrote it (InputError where it lacks a column)."""
    df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    missing = [c for c in CLAIMS_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{path} lacks column(s) {', '.join(missing)}")
    for c in ("description", "statistic_name", "test", "threshold", "reason", "subject"):
        df[c] = df[c].fillna("").astype(str)
    return df


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
    ap.add_argument(
        "--power",
        default="{}",
        help="the config's analysis.power as JSON: a claim whose planned power is short says underpowered",
    )
    ap.add_argument(
        "--sampled-power",
        type=float,
        default=0.95,
        help="sampling.two_sample.power: the planted sampler's planned power per prompt",
    )
    ap.add_argument("--out", help="CSV, with a Markdown twin (default: TABLES/claims.csv)")
    args = ap.parse_args(argv)
    planned = read_section(power.Power, args.power, "--power (analysis.power)")
    if not 0 < args.alpha < 0.5:
        raise InputError(f"--alpha must lie in (0, 0.5), got {args.alpha}")
    if not args.equivalence_margin > 0:
        raise InputError(f"--equivalence-margin must be positive, got {args.equivalence_margin}")
    df = claims_table(args.tables, Settings(args.alpha, args.equivalence_margin, planned, args.sampled_power))
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
