"""The machine as an axis (docs/MACHINES.md): each claim's verdict under every numerical environment
(a CPU kind and a thread count) a study ran, whether any differs, and the planted control that
must make that comparison fail.

`orthrus compare-envs` (orthrus/report/compare_envs.py) writes the two tables these claims read:
`verdicts_by_env.csv` (one row per claim and subject, one verdict column per environment, `agree`)
and `machine_probes.csv` (one row per environment: what its libraries ran and the bytes of a few
fixed products, `orthrus machine-probe`). A tables directory without them (a study on one machine)
leaves both claims untestable.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from pathlib import Path

import pandas as pd

from orthrus.contracts import MACHINE_TABLES
from orthrus.report.claims.base import ABSENT, FAILS, HOLDS, Settings, claim_row, missing_row, verdicts_agree

INVARIANT, PLANTED = "verdicts-machine-invariant", "planted-machine-caught"
MACHINE_CLAIMS = (INVARIANT, PLANTED)
VERDICTS_BY_ENV, MATCH_BY_ENV, MACHINE_PROBES = MACHINE_TABLES
KEY = ["claim", "subject"]
# the probe whose bytes decide the planted flip: a bf16 product, oneDNN's or ATen's by kind
PLANTED_PRODUCT = "bf16_matmul"


def env_name(kind: str, threads: int) -> str:
    return f"{kind}-t{threads}"


def verdict_table(claims: Mapping[str, pd.DataFrame], common: bool = False) -> pd.DataFrame:
    """One row per claim and subject of any environment's claims (the machine claims left out: they
    speak of environments, not in one), its verdict under each (`absent` where one has no row),
    and `agree`: every pair of environments agrees (`verdicts_agree`, as `orthrus compare-runs`).
    `common`: only the claims and subjects every environment states (environments over different grids)."""
    if not claims:
        return pd.DataFrame(columns=[*KEY, "agree"])
    wide = None
    for env, df in claims.items():
        part = df.loc[~df["claim"].isin(MACHINE_CLAIMS), [*KEY, "verdict"]].rename(columns={"verdict": env})
        wide = part if wide is None else wide.merge(part, on=KEY, how="inner" if common else "outer", sort=False)
    envs = list(claims)
    # an outer merge sorts its keys: back to the order the environments state them in
    first = {
        k: i for i, k in enumerate(dict.fromkeys(k for df in claims.values() for k in zip(df["claim"], df["subject"])))
    }
    wide = wide.iloc[sorted(range(len(wide)), key=lambda i: first[(wide["claim"].iloc[i], wide["subject"].iloc[i])])]
    wide[envs] = wide[envs].fillna(ABSENT)
    wide["agree"] = [all(verdicts_agree(a, b) for a, b in combinations(row, 2)) for row in wide[envs].values]
    return wide.reset_index(drop=True)


def environments(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c not in (*KEY, "agree")]


def differing(table: pd.DataFrame) -> list[str]:
    """`claim/subject (env=verdict, ...)` for every row whose environments disagree."""
    envs = environments(table)
    return [
        f"{r['claim']}/{r['subject']} (" + ", ".join(f"{e}={r[e]}" for e in envs) + ")"
        for _, r in table[~table["agree"].astype(bool)].iterrows()
    ]


def invariance_row(table: pd.DataFrame, claim: str = INVARIANT) -> dict:
    """The claim's row: holds when no claim's verdict differs between environments."""
    envs = environments(table)
    if len(envs) < 2 or not len(table):
        return claim_row(claim, "every claim and subject", reason=f"{len(envs)} environment(s): nothing to compare")
    differ = differing(table)
    return claim_row(
        claim,
        "every claim and subject",
        statistic_name="claims and subjects whose verdicts differ",
        statistic=len(differ),
        n=len(table),
        test="each claim's verdict under every environment, pairwise as orthrus compare-runs: "
        "equal, both silent (absent, untestable), or either underpowered",
        threshold="= 0",
        verdict=FAILS if differ else HOLDS,
        reason=f"{len(envs)} environments: {', '.join(envs)}" + (f"; differ: {'; '.join(differ)}" if differ else ""),
    )


def _target(table: pd.DataFrame) -> int | None:
    """The row the planted control flips: the first whose environments all agree on holds or fails."""
    envs = environments(table)
    for i, r in table.iterrows():
        if bool(r["agree"]) and r[envs[0]] in (HOLDS, FAILS) and all(r[e] == r[envs[0]] for e in envs):
            return i
    return None


def planted(table: pd.DataFrame, probes: pd.DataFrame, product: str = PLANTED_PRODUCT):
    """The planted environments: `table` with one row's verdict flipped (holds <-> fails) in every
    environment whose `product` bytes (`probes`, one row per environment) differ from the first
    environment's, a verdict that follows the machine's arithmetic, not the data. Returns (the planted
    table, the flipped row's index or None, the flipped environments); the flip through real
    arithmetic: no environment is flipped where the kinds compute the product alike."""
    envs = environments(table)
    digests = probes.set_index("env")[product].reindex(envs)
    target = _target(table)
    flipped = [e for e in envs[1:] if pd.notna(digests[e]) and digests[e] != digests[envs[0]]]
    out = table.copy()
    if target is None or not flipped:
        return out, target, []
    for e in flipped:
        out.loc[target, e] = {HOLDS: FAILS, FAILS: HOLDS}[out.loc[target, e]]
    envs_verdicts = out.loc[:, envs].values
    out["agree"] = [all(verdicts_agree(a, b) for a, b in combinations(row, 2)) for row in envs_verdicts]
    return out, target, flipped


def control_row(table: pd.DataFrame, probes: pd.DataFrame | None) -> dict:
    """`planted-machine-caught`: the invariance claim, on the planted environments, fails and names
    the flipped claim (holds); untestable where no environment's product bytes differ."""
    subject = f"a verdict flipped where the {PLANTED_PRODUCT} bytes differ"
    if probes is None or PLANTED_PRODUCT not in probes.columns or len(environments(table)) < 2:
        return claim_row(PLANTED, subject, reason=f"no {MACHINE_PROBES} of two environments or more")
    missing = [e for e in environments(table) if e not in set(probes["env"])]
    if missing:
        return claim_row(PLANTED, subject, reason=f"{MACHINE_PROBES} has no row for {', '.join(missing)}")
    out, target, flipped = planted(table, probes)
    if target is None:
        return claim_row(PLANTED, subject, reason="no claim on which every environment holds or fails alike")
    name = f"{table.loc[target, 'claim']}/{table.loc[target, 'subject']}"
    if not flipped:
        digest = probes[PLANTED_PRODUCT].iloc[0]
        return claim_row(
            PLANTED,
            subject,
            reason=f"every environment computes the {PLANTED_PRODUCT} alike ({digest}): nothing to plant",
        )
    row = invariance_row(out, PLANTED)
    caught = row["verdict"] == FAILS and any(d.startswith(name + " (") for d in differing(out))
    return row | {
        "subject": subject,
        "statistic_name": "claims and subjects whose verdicts differ, planted",
        "test": f"{INVARIANT} on the planted environments",
        "threshold": "> 0, naming the flipped claim",
        "verdict": HOLDS if caught else FAILS,
        "reason": f"flipped {name} under {', '.join(flipped)} (their {PLANTED_PRODUCT} bytes differ from "
        f"{environments(table)[0]}'s): " + ("caught" if caught else "NOT caught") + f"; {row['reason']}",
    }


def read_verdicts(tables: Path) -> pd.DataFrame | None:
    path = Path(tables) / VERDICTS_BY_ENV
    if not path.exists():
        return None
    df = pd.read_csv(path, keep_default_na=False, dtype=str)
    df["agree"] = df["agree"].str.lower() == "true"
    return df


def machine_invariant(tables: Path, s: Settings) -> list[dict]:
    table = read_verdicts(tables)
    if table is None:
        return missing_row(INVARIANT, "every claim and subject", f"no {VERDICTS_BY_ENV} (one environment)")
    return [invariance_row(table)]


def planted_machine_caught(tables: Path, s: Settings) -> list[dict]:
    table = read_verdicts(tables)
    probes_path = Path(tables) / MACHINE_PROBES
    if table is None:
        return missing_row(
            PLANTED, f"a verdict flipped where the {PLANTED_PRODUCT} bytes differ", f"no {VERDICTS_BY_ENV}"
        )
    probes = pd.read_csv(probes_path, dtype=str) if probes_path.exists() else None
    return [control_row(table, probes)]
