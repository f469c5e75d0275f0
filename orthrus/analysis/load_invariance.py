"""The load table (`load.csv`): every server run the OpenAI engine made (its engine record's `concurrency`,
orthrus/engines/openai_run.py) with its match rate against its reference (the same server at concurrency
1 for a run under load), where it forks, the verdict of every first divergence, and how many distinct
completions each prompt got over the run's repeats (Thinking Machines' measure of nondeterminism, here
per concurrency: at 1 it is the server's run-to-run noise, under load the batch's effect on top).
Runs without a concurrency in their record (every other engine) have no row."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orthrus.analysis.match import rate_row
from orthrus.analysis.uncertainty import verdict_counts
from orthrus.analysis.widths import speculative_setting
from orthrus.contracts import CONFIG, EXTERNAL_DECODER, LOAD_COLUMNS
from orthrus.options import env_record


def load_setting(env) -> dict | None:
    """The load a server run was made under (server, concurrency, slots, repeats, planted), None for a run
    whose record has no concurrency."""
    engine = env_record(env).get("engine_env")
    if not isinstance(engine, dict) or "concurrency" not in engine:
        return None
    return {
        "server": str(engine.get("server", "")),
        "concurrency": int(engine["concurrency"]),
        "slots": int(engine.get("slots") or 0),
        "repeats": int(engine.get("repeats") or 1),
        "planted": bool(engine.get("planted", False)),
    }


def distinct_completions(env) -> int | None:
    """How many different token sequences a prompt got over its run's repeats (`extra.completions`)."""
    completions = env_record(env).get("extra", {}).get("completions")
    return len({tuple(c) for c in completions}) if completions else None


def _tops(rows: pd.DataFrame | None) -> dict:
    """prompt_id -> (its tokens, the server's top log-probabilities at each, where its file gave them)."""
    if rows is None:
        return {}
    return {r.prompt_id: (list(r.tokens), env_record(r.env).get("engine_logprobs")) for r in rows.itertuples()}


def logprob_moves(run: pd.DataFrame, reference: pd.DataFrame | None, shared: dict) -> dict:
    """How far load moves the server's own numbers where it changes no token: over the positions where the run
    and its reference (their decoding rows; None for an in-process reference) emitted the same tokens
    (`shared`: prompt_id -> their common prefix's length) and both files give the server's top
    log-probabilities, the largest |difference| of the emitted token's log-probability (`logprob_moved_max`)
    and the share of those positions where it moved at all (`frac_logprob_moved`); NaN where no such
    position exists."""
    ours, theirs = _tops(run), _tops(reference)
    moves = []
    for pid, n in shared.items():
        (tokens, top), (_, ref_top) = ours.get(pid, ([], None)), theirs.get(pid, ([], None))
        if not isinstance(top, list) or not isinstance(ref_top, list):
            continue
        for t in range(min(int(n), len(tokens), len(top), len(ref_top))):
            a, b = dict(map(tuple, top[t] or ())), dict(map(tuple, ref_top[t] or ()))
            if tokens[t] in a and tokens[t] in b:
                moves.append(abs(float(a[tokens[t]]) - float(b[tokens[t]])))
    m = np.asarray(moves)
    return {
        "logprob_moved_max": float(m.max()) if m.size else np.nan,
        "frac_logprob_moved": float((m > 0).mean()) if m.size else np.nan,
    }


def load_table(traj: pd.DataFrame, decode: pd.DataFrame, fx: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per server run (model = its NAME-cC entry): match rate against its reference (Wilson 95% CI),
    the diverged prompts and the median position of their first divergence, the verdict counts of those
    divergences (forensics rows `fx`), and the distinct completions per prompt over the repeats (mean, max,
    and the share of prompts with more than one)."""
    ext = decode[decode["decoder"] == EXTERNAL_DECODER] if len(decode) else decode
    runs, rows_of = {}, dict(list(ext.groupby(CONFIG, sort=False))) if len(ext) else {}
    for key, g in rows_of.items():
        setting = load_setting(g["env"].iloc[0])
        if setting is not None:
            distinct = [d for d in map(distinct_completions, g["env"]) if d is not None]
            runs[key] = (setting, speculative_setting(g["env"].iloc[0]) or ("none", 0), distinct)
    by_cell = dict(list(fx.groupby(CONFIG)["verdict"])) if fx is not None and len(fx) else {}
    none = pd.Series(dtype=object)
    rows = []
    for key, g in traj[traj["decoder"] == EXTERNAL_DECODER].groupby(CONFIG, sort=True) if len(traj) else ():
        if key not in runs:
            continue
        setting, (method, k), distinct = runs[key]
        diverged = g.loc[~g["match"].astype(bool), "first_divergence"].dropna().astype(int)
        d = np.asarray(distinct, dtype=float)
        shared = dict(zip(g["prompt_id"], g["common_prefix_len"].fillna(0)))
        reference = rows_of.get((g["reference"].iloc[0], *key[1:]))
        rows.append(
            dict(zip(CONFIG, key))
            | {"reference": g["reference"].iloc[0], "server": setting["server"], "method": method, "k": k}
            | {c: setting[c] for c in ("concurrency", "slots", "planted")}
            | rate_row(g["match"])
            | {
                "n_diverged": len(diverged),
                "first_divergence_median": float(np.median(diverged)) if len(diverged) else np.nan,
            }
            | verdict_counts(by_cell.get(key, none), n=len(diverged))
            | {
                "repeats": setting["repeats"],
                "distinct_mean": float(d.mean()) if d.size else np.nan,
                "distinct_max": int(d.max()) if d.size else pd.NA,
                "frac_varying": float((d > 1).mean()) if d.size else np.nan,
            }
            | logprob_moves(rows_of[key], reference, shared)
        )
    out = pd.DataFrame(rows, columns=LOAD_COLUMNS)
    out["distinct_max"] = out["distinct_max"].astype("Int64")
    out["k"] = out["k"].astype("int64")
    return out.sort_values(["server", "method", "precision", "planted", "concurrency", "model"], ignore_index=True)
