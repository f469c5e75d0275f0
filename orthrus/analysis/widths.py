"""The verify-width table (`engine_widths.csv`): an engine's speculative runs that differ only in their
draft width k, side by side with their match rate and where their first divergence falls, because
where a speculative engine forks can depend on the width it verifies (llama.cpp #27407) and its
rate can step with the kernels each width dispatches (#25618). Read from each decoding row's
engine record's `speculative` (env.engine_env, "METHOD k=K", as every engine recipe writes it); runs without speculation have no
row. A sweep is the rows sharing a `reference` and `method`."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from orthrus.analysis.match import rate_row
from orthrus.analysis.tpf import tpf_per_prompt
from orthrus.contracts import CONFIG, ENGINE_WIDTH_COLUMNS, EXTERNAL_DECODER
from orthrus.options import env_record

_SPECULATIVE = re.compile(r"^(?P<method>\S+) k=(?P<k>\d+)$")


def speculative_setting(env) -> tuple[str, int] | None:
    """(method, k) of an ingested engine row's recorded speculation, None where it did not speculate."""
    engine = env_record(env).get("engine_env")
    m = _SPECULATIVE.match(str(engine.get("speculative", ""))) if isinstance(engine, dict) else None
    return (m["method"], int(m["k"])) if m else None


def engine_widths(traj: pd.DataFrame, decode: pd.DataFrame) -> pd.DataFrame:
    """One row per external speculative configuration: its method and width, its match rate against
    its reference (Wilson 95% CI), how many prompts diverged, the median and smallest first-divergence
    position among them, and its mean tokens per verifying forward."""
    ext = decode[decode["decoder"] == EXTERNAL_DECODER]
    settings = {}
    for key, g in ext.groupby(CONFIG, sort=False):
        found = {speculative_setting(e) for e in g["env"]} if "env" in g.columns else {None}
        if len(found) == 1 and None not in found:
            settings[key] = found.pop()
    tpf = tpf_per_prompt(ext).groupby(CONFIG)["tpf_verify"].mean() if len(ext) else pd.Series(dtype=float)
    rows = []
    for key, g in traj[traj["decoder"] == EXTERNAL_DECODER].groupby(CONFIG, sort=True):
        if key not in settings:
            continue
        method, k = settings[key]
        diverged = g.loc[~g["match"].astype(bool), "first_divergence"].dropna().astype(int)
        rows.append(
            dict(zip(CONFIG, key))
            | {"reference": g["reference"].iloc[0], "method": method, "k": k}
            | rate_row(g["match"])
            | {
                "n_diverged": len(diverged),
                "first_divergence_median": float(np.median(diverged)) if len(diverged) else np.nan,
                "first_divergence_min": int(diverged.min()) if len(diverged) else pd.NA,
                "tpf_verify": float(tpf.get(key, np.nan)),
            }
        )
    out = pd.DataFrame(rows, columns=ENGINE_WIDTH_COLUMNS)
    out["first_divergence_min"] = out["first_divergence_min"].astype("Int64")
    return out.sort_values(["reference", "method", "k", "model"], kind="stable", ignore_index=True)
