"""What every claim family shares: the verdicts, the settings, reading a table and writing one
claim row (orthrus/report/claims/__init__.py adds the claim's description and source)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orthrus.contracts import CLAIM_VERDICTS, CONFIG, ERRORS, SPECULATIVE
from orthrus.decoders import TABLE

HOLDS, FAILS, UNTESTABLE, UNDERPOWERED = VERDICTS = CLAIM_VERDICTS

# The decoders this package runs that are lossless in exact arithmetic, whose divergences the claims
# judge (orthrus/decoders.py's `lossless`): a decoder added to the table joins them; the reference is
# what they are compared with, and an engine's file has no replay to judge.
LOSSLESS = tuple(d.name for d in TABLE if d.lossless and d.role != "reference" and d.runner != "engine")

# the precision of the inexactness claims (Tables 3-6): the follow-up paper's
REDUCED = "bf16"

DEFAULT_MARGIN = 2.0

DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA  # level of the p-value tests (beta1, Welch, TOST)
    equivalence_margin: float = DEFAULT_MARGIN  # TOST margin, in points of the benchmark's score
    # the config's analysis.power, checked (claims/power.py's Power); None: no plan
    power: object = None
    # sampling.two_sample.power: the planted sampler's planned power per prompt, below which a miss is no failure
    sampled_power: float = 0.95


# a claim one run does not state and the other cannot test (e.g. a stage that ran in neither, such as
# the sampling audit when it is off) says nothing either way
ABSENT = "absent"
SILENT = frozenset({ABSENT, UNTESTABLE})


def verdicts_agree(a: str, b: str) -> bool:
    """Whether two runs' verdicts on one claim and subject agree: the same, both silent (absent and
    untestable), or either `underpowered` (a verdict of the config's power plan, not of the data:
    orthrus/report/claims/power.py)."""
    return a == b or frozenset({a, b}) == SILENT or UNDERPOWERED in (a, b)


def read_table(tables: Path, name: str) -> pd.DataFrame | None:
    path = tables / name
    return pd.read_csv(path) if path.exists() else None


def cell_name(r) -> str:
    return "/".join(str(r[c]) for c in CONFIG)


def error_count(df: pd.DataFrame) -> int:
    return int(df[ERRORS].sum()) if ERRORS in df.columns and len(df) else 0


def claim_row(
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
    return {
        "claim": claim,
        "subject": subject,
        "description": "",  # the claim's, and its source table, from the registry (claims_table)
        "source": "",
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


def missing_row(claim: str, subject: str, why: str) -> list[dict]:
    return [claim_row(claim, subject, reason=why)]


def lossless_cells(df: pd.DataFrame, precision: str, speculative: bool = False) -> pd.DataFrame:
    keep = [d for d in LOSSLESS if not speculative or d in SPECULATIVE]
    return df[df["decoder"].isin(keep) & (df["precision"] == precision)]


DEFAULT_SETTINGS = Settings()
