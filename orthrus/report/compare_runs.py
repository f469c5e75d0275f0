"""`orthrus compare-runs`: do two runs reach the same verdicts on the study's claims?

    orthrus compare-runs DIR_A DIR_B [--common] [--equivalence-margin 2] [--alpha 0.05]

DIR_A and DIR_B are two tables directories (`results/tables/`, `docs/results/`), e.g. of two
machines, library versions, seeds or code versions. For each claim and subject of either run's
`claims.csv` (`orthrus claims`; computed here from the tables, with the given settings, for a run
that has none) it prints both verdicts, both statistics with their intervals, and whether the two
intervals overlap. Exit status 0 when every verdict agrees, 1 otherwise; a claim only one run holds
is a disagreement unless `--common` leaves it out (e.g. runs over different grids), except where the
other run finds it untestable (neither says anything). An `underpowered` verdict (the config planned
too little power for the claim) agrees with any other: it states no finding.

`orthrus compare-tables` asks another question: are the tables the same bytes? Use it for a change
that must not move a single bit (a refactor, on one machine); use `compare-runs` where the numbers
are expected to move (another CPU or GPU, another seed, another library version) and the question
is whether the findings hold.
"""

from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from orthrus.report.claims import DEFAULT_ALPHA, DEFAULT_MARGIN, Settings, load_or_compute
from orthrus.report.claims.base import ABSENT, UNDERPOWERED, verdicts_agree

KEY = ["claim", "subject"]


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool | None:
    """Whether two closed intervals share a point; None where either is missing."""
    if any(math.isnan(v) for v in (*a, *b)):
        return None
    return max(a[0], b[0]) <= min(a[1], b[1])


def compare(a: pd.DataFrame, b: pd.DataFrame, common: bool = False) -> pd.DataFrame:
    """One row per claim and subject: both verdicts, statistics and intervals, `overlap`, `agree`."""
    cols = KEY + ["verdict", "statistic", "ci_low", "ci_high", "reason"]
    m = a[cols].merge(
        b[cols], on=KEY, how="inner" if common else "outer", suffixes=("_a", "_b"), sort=False, indicator=True
    )
    order = {
        k: i for i, k in enumerate(dict.fromkeys(list(map(tuple, a[KEY].values)) + list(map(tuple, b[KEY].values))))
    }
    m = m.iloc[sorted(range(len(m)), key=lambda i: order[(m["claim"].iloc[i], m["subject"].iloc[i])])]
    m["overlap"] = [
        overlap((_num(r.ci_low_a), _num(r.ci_high_a)), (_num(r.ci_low_b), _num(r.ci_high_b))) for r in m.itertuples()
    ]
    for side in ("a", "b"):
        m[f"verdict_{side}"] = m[f"verdict_{side}"].fillna(ABSENT)
    m["agree"] = [verdicts_agree(a, b) for a, b in zip(m["verdict_a"], m["verdict_b"])]
    return m.drop(columns="_merge").reset_index(drop=True)


def _stat(x, low, high) -> str:
    x, low, high = _num(x), _num(low), _num(high)
    if math.isnan(x):
        return "-"
    return f"{x:.3g}" + ("" if math.isnan(low) else f" [{low:.3g}, {high:.3g}]")


def format_report(m: pd.DataFrame, dir_a, dir_b, notes=()) -> str:
    rows = [
        (
            r.claim,
            r.subject,
            r.verdict_a,
            r.verdict_b,
            _stat(r.statistic_a, r.ci_low_a, r.ci_high_a),
            _stat(r.statistic_b, r.ci_low_b, r.ci_high_b),
            {True: "yes", False: "no", None: "-"}[r.overlap],
            "agree" if r.agree else "DIFFER",
        )
        for r in m.itertuples()
    ]
    head = (
        "claim",
        "subject",
        "verdict A",
        "verdict B",
        "statistic A [interval]",
        "statistic B [interval]",
        "overlap",
        "",
    )
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip()
    out = [f"A: {dir_a}", f"B: {dir_b}", *notes, line(head), *map(line, rows)]
    n_diff = int((~m["agree"]).sum())
    n_short = int(((m["verdict_a"] == UNDERPOWERED) | (m["verdict_b"] == UNDERPOWERED)).sum()) if len(m) else 0
    short = f" ({n_short} underpowered in either run: no finding)" if n_short else ""
    out.append(f"{len(m)} claim(s), {n_diff} verdict(s) differ{short}" if len(m) else "no claims")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus compare-runs", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir_a", metavar="DIR_A", help="a tables directory (e.g. the committed run, docs/results)")
    ap.add_argument("dir_b", metavar="DIR_B", help="the other (e.g. results/tables of this machine's run)")
    ap.add_argument("--common", action="store_true", help="compare only the claims and subjects both runs hold")
    ap.add_argument(
        "--equivalence-margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="for a run without claims.csv: the benchmark claim's TOST margin, in points",
    )
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="for a run without claims.csv: the tests' level")
    args = ap.parse_args(argv)
    settings = Settings(args.alpha, args.equivalence_margin)
    (a, computed_a), (b, computed_b) = load_or_compute(args.dir_a, settings), load_or_compute(args.dir_b, settings)
    notes = [
        f"({side}: no claims.csv, claims computed from its tables)"
        for side, c in (("A", computed_a), ("B", computed_b))
        if c
    ]
    m = compare(a, b, args.common)
    sys.stdout.write(format_report(m, args.dir_a, args.dir_b, notes))
    return 0 if len(m) and bool(m["agree"].all()) else 1


if __name__ == "__main__":
    sys.exit(main())
