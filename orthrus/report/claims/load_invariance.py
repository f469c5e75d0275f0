"""The load claims (load.csv): a server's greedy output under load equals its output at concurrency 1 up
to ties and rounding, and the planted control (a proxy that breaks greedy decoding while another request
is in flight, orthrus/engines/openai_planted.py) is caught."""

from __future__ import annotations

from pathlib import Path

from orthrus.report.claims.base import (
    FAILS,
    HOLDS,
    UNTESTABLE,
    Settings,
    claim_row,
    error_count,
    missing_row,
    read_table,
)
from orthrus.stats import wilson_ci

NO_LOAD = "no server ran at a concurrency above 1 (decode.engines: engine openai, concurrency [1, 4, ...])"


def _under_load(tables: Path, planted: bool):
    df = read_table(tables, "load.csv")
    if df is None:
        return None
    is_planted = df["planted"].map(lambda v: str(v).strip().lower() in ("true", "1"))
    return df[(df["concurrency"] > 1) & (is_planted == planted)]


def _verdicts(r) -> str:
    return (
        f"{int(r['n_diverged'])} of {int(r['n'])} prompts diverged from concurrency 1 (median first divergence "
        f"{r['first_divergence_median']:g}): {int(r['n_tie'])} tie, {int(r['n_rounding'])} rounding, "
        f"{int(r['n_structural'])} structural, {int(r['n_no_verdict'])} without a verdict"
    )


def load_invariant(tables: Path, s: Settings) -> list[dict]:
    """Per server run at concurrency > 1 (not planted): every prompt's greedy output equals the same server's
    at concurrency 1, or parts from it at a tie or a rounding (verdicts from the server's own log-probabilities);
    the distinct completions over the repeats go in the reason."""
    df = _under_load(tables, planted=False)
    if df is None or df.empty:
        return missing_row("load-invariant", "every server", NO_LOAD)
    out = []
    for _, r in df.iterrows():
        n, bad = int(r["n"]), int(r["n_structural"] + r["n_no_verdict"])
        ok = bad == 0 and n > 0
        distinct = (
            f"; {float(r['distinct_mean']):.2f} distinct completions per prompt (at most {int(r['distinct_max'])}) "
            f"over {int(r['repeats'])} repeats, {float(r['frac_varying']):.0%} of prompts varying"
        )
        out.append(
            claim_row(
                "load-invariant",
                f"{r['model']} ({r['server']}, {r['method']}, {r['precision']}, c={int(r['concurrency'])} "
                f"vs {r['reference']})",
                "match rate against concurrency 1",
                r["match_rate"],
                (r["ci_low"], r["ci_high"]),
                n,
                "verdict of each first divergence from concurrency 1 (tie / rounding / structural)",
                "no structural or unexplained divergence",
                verdict=(HOLDS if ok else FAILS) if n else UNTESTABLE,
                reason=(_verdicts(r) + distinct) if n else "no prompt compared",
                errors=error_count(df.loc[[r.name]]),
            )
        )
    return out


def planted_load_caught(tables: Path, s: Settings) -> list[dict]:
    """Per planted server run at concurrency > 1: the audit finds a structural divergence from concurrency 1.
    Untestable where the planted perturbation changed no token (it needs two requests in flight at once)."""
    df = _under_load(tables, planted=True)
    if df is None or df.empty:
        return missing_row("planted-load-caught", "the planted server", NO_LOAD.replace("server", "planted server", 1))
    out = []
    for _, r in df.iterrows():
        n, caught = int(r["n"]), int(r["n_structural"])
        diverged = int(r["n_diverged"]) > 0
        out.append(
            claim_row(
                "planted-load-caught",
                f"{r['model']} ({r['server']}, c={int(r['concurrency'])})",
                "share of prompts with a structural divergence",
                caught / n if n else float("nan"),
                wilson_ci(caught, n),
                n,
                "verdict of each first divergence from concurrency 1",
                "at least one structural divergence",
                verdict=(HOLDS if caught else FAILS) if diverged else UNTESTABLE,
                reason=_verdicts(r) if diverged else "the planted perturbation changed no token here",
                errors=error_count(df.loc[[r.name]]),
            )
        )
    return out
