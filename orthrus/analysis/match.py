"""Trajectory comparison with the AR reference and the match tables built on it: per prompt
(`trajectories.parquet`), overall and per domain (Wilson 95% CI), between every pair of decoding
results, and the speculative decoders side by side (`decoders.csv`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orthrus.analysis.load import AnalysisError, warn
from orthrus.analysis.tpf import tpf_per_prompt
from orthrus.analysis.uncertainty import verdict_counts
from orthrus.contracts import (
    COMPARED_DECODERS,
    CONFIG,
    CONTROLS,
    DECODERS_COLUMNS,
    EXTERNAL_DECODER,
    MATCH_BY_DOMAIN_COLUMNS,
    MATCH_OVERALL_COLUMNS,
    PAIRWISE_COLUMNS,
    REFERENCE_DECODER,
    SPECULATIVE,
    TRAJECTORY_COLUMNS,
    VERDICT_COUNTS,
)
from orthrus.options import declared_reference
from orthrus.stats import common_prefix_len, first_divergence, levenshtein, wilson_ci


def detect_reference(decode: pd.DataFrame) -> str:
    """The one model decoded with the reference decoder; AnalysisError when not unique."""
    refs = sorted(decode.loc[decode["decoder"] == REFERENCE_DECODER, "model"].unique())
    if len(refs) != 1:
        raise AnalysisError(
            f"cannot infer the reference model: decoder {REFERENCE_DECODER!r} has models {refs}; pass --reference"
        )
    return refs[0]


def _compare(rows: list, key: tuple, grp: pd.DataFrame, ref_tokens: dict, reference: str) -> int:
    """Append one comparison row per prompt of `grp` to `rows`; the number without a reference."""
    lost = 0
    for pid, dom, toks in zip(grp["prompt_id"], grp["domain"], grp["tokens"]):
        rt = ref_tokens.get(pid)
        if rt is None:
            lost += 1
            continue
        div = first_divergence(toks, rt)
        rows.append(
            (
                *key,
                reference,
                pid,
                dom,
                div is None,
                div,
                common_prefix_len(toks, rt),
                levenshtein(toks, rt) if div is not None else 0,
                len(toks),
                len(rt),
            )
        )
    return lost


def _typed(out: pd.DataFrame) -> pd.DataFrame:
    """The comparison rows with TRAJECTORY_COLUMNS' dtypes (ppl still NaN)."""
    out["match"] = out["match"].astype(bool)
    out["first_divergence"] = pd.array(
        [None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in out["first_divergence"]],
        dtype="Int64",
    )
    for c in ("common_prefix_len", "levenshtein", "n_tokens", "ref_n_tokens"):
        out[c] = out[c].astype("int64")
    out["ppl"] = np.nan
    return out[TRAJECTORY_COLUMNS]


def _declared(grp: pd.DataFrame) -> str | None:
    """The external decoder a configuration's rows declare as their reference (None: the reference model's ar-ref)."""
    if "env" not in grp.columns or grp["decoder"].iloc[0] != EXTERNAL_DECODER:
        return None
    return declared_reference(grp["env"].iloc[0])


def declared_references(decode: pd.DataFrame, errors: pd.DataFrame) -> dict[tuple, tuple]:
    """{configuration of an external decoder that declares a reference (an engine pair): the
    configuration of that reference}, for the error counts; the reference's cell is read from its
    rows, kept or errors."""
    if "env" not in decode.columns:
        return {}
    cells = {
        r[0]: tuple(r)
        for frame in (decode, errors)
        if len(frame)
        for r in frame.loc[frame["decoder"] == EXTERNAL_DECODER, CONFIG].itertuples(index=False, name=None)
    }
    out = {}
    for key, grp in decode[decode["decoder"] == EXTERNAL_DECODER].groupby(CONFIG, sort=True):
        name = _declared(grp)
        if name in cells:
            out[key] = cells[name]
    return out


def compare_trajectories(decode: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per-prompt comparison of every (model, decoder, precision, attention) with the reference:
    the reference model's ar-ref at the same precision and attention or, for an external decoder
    that declares one (an engine pair), that external decoder's trajectories."""
    is_ref = (decode["decoder"] == REFERENCE_DECODER) & (decode["model"] == reference)
    if not is_ref.any():
        raise AnalysisError(
            f"no decoding result with decoder {REFERENCE_DECODER!r} and model {reference!r} "
            f"among the --decode files (reference models present: "
            f"{sorted(decode.loc[decode['decoder'] == REFERENCE_DECODER, 'model'].unique())})"
        )
    ref = decode[is_ref]
    cand = decode[decode["decoder"].isin(COMPARED_DECODERS)]
    rows = []
    for key, grp in cand.groupby(CONFIG, sort=True):
        model, decoder, precision, attention = key
        pair = _declared(grp)
        if pair is not None:
            r = decode[(decode["decoder"] == EXTERNAL_DECODER) & (decode["model"] == pair)]
            if r.empty:
                warn(
                    f"{model}/{decoder}/{precision}/{attention} declares the reference {pair!r}, which has no "
                    "trajectories among the --decode files (or only error rows); skipping it"
                )
                continue
        else:
            r = ref[(ref["precision"] == precision) & (ref["attention"] == attention)]
            if r.empty:
                warn(
                    f"no reference {reference}/{REFERENCE_DECODER} at {precision}/{attention}; "
                    f"skipping {model}/{decoder}"
                )
                continue
        lost = _compare(rows, key, grp, dict(zip(r["prompt_id"], r["tokens"])), pair or reference)
        if lost:
            warn(f"{model}/{decoder}/{precision}/{attention}: {lost} prompt(s) have no reference")
    return _typed(pd.DataFrame(rows, columns=TRAJECTORY_COLUMNS[:-1]))


def attach_ppl(traj: pd.DataFrame, ppl: pd.DataFrame | None, pair_ppl: pd.DataFrame | None = None) -> pd.DataFrame:
    """`traj` with each reference response's perplexity, joined on prompt (and precision and
    attention where the perplexity file has several per prompt); a row compared with an external
    decoder (an engine pair) takes that decoder's response's, from `pair_ppl` (`reference`,
    `prompt_id`, `ppl`; NaN where it has none)."""
    traj = traj.drop(columns="ppl")
    if ppl is None or ppl.empty:
        traj["ppl"] = np.nan
    else:
        keys = [k for k in ("prompt_id", "precision", "attention") if k in ppl.columns]
        traj = traj.merge(ppl[keys + ["ppl"]], on=keys, how="left")
    pair = traj["reference"].isin(set(traj.loc[traj["decoder"] == EXTERNAL_DECODER, "model"]))
    if pair.any():
        scores = (
            {} if pair_ppl is None else dict(zip(zip(pair_ppl["reference"], pair_ppl["prompt_id"]), pair_ppl["ppl"]))
        )
        traj.loc[pair, "ppl"] = [
            scores.get(k, np.nan) for k in zip(traj.loc[pair, "reference"], traj.loc[pair, "prompt_id"])
        ]
    if ppl is not None and not ppl.empty:
        missing = traj["ppl"].isna() & traj["decoder"].isin(SPECULATIVE)
        if missing.any():
            warn(f"{int(missing.sum())} speculative-decoder trajectory row(s) have no perplexity")
    return traj[TRAJECTORY_COLUMNS]


def rate_row(matches) -> dict:
    """n, exact-match rate and its Wilson 95% CI of a run of per-prompt matches."""
    m = np.asarray(matches, dtype=bool)
    n, k = int(m.size), int(m.sum())
    low, high = wilson_ci(k, n)
    return {"n": n, "match_rate": k / n if n else math.nan, "ci_low": low, "ci_high": high}


def match_overall(traj: pd.DataFrame) -> pd.DataFrame:
    """Exact-match rate of each configuration, Wilson 95% CI."""
    rows = [dict(zip(CONFIG, key), **rate_row(g["match"])) for key, g in traj.groupby(CONFIG, sort=True)]
    return pd.DataFrame(rows, columns=MATCH_OVERALL_COLUMNS)


def match_by_domain(traj: pd.DataFrame) -> pd.DataFrame:
    """match_overall per domain."""
    keys = CONFIG + ["domain"]
    rows = [dict(zip(keys, key), **rate_row(g["match"])) for key, g in traj.groupby(keys, sort=True)]
    return pd.DataFrame(rows, columns=MATCH_BY_DOMAIN_COLUMNS)


def with_rows(table: pd.DataFrame, keys: list, wanted) -> pd.DataFrame:
    """`table` with an empty row (n 0, its values NaN) for each key of `wanted` it lacks: a cell
    whose every prompt errored has no rows to compute from, but stays in the table, where its
    error count says why. Rows keep the tables' order (a domain `all` after the others)."""

    def text(key):  # a missing value (None, NA, NaN) as one
        return tuple("" if pd.isna(v) else str(v) for v in key)

    have = {text(k) for k in table[keys].itertuples(index=False, name=None)}
    add = [dict(zip(keys, k)) for k in dict.fromkeys(wanted) if text(k) not in have]
    if not add:
        return table
    new = pd.DataFrame(add).astype({k: table[k].dtype for k in keys if str(table[k].dtype) != "object"})
    out = pd.concat([table, new.assign(n=0)], ignore_index=True)
    out["n"] = out["n"].astype("int64")
    order = {k: (lambda c: c.map(lambda v: (v == "all", v))) if k == "domain" else (lambda c: c) for k in keys}
    out = out.sort_values(keys, key=lambda c: order[c.name](c), kind="stable")
    return out.reset_index(drop=True)[table.columns]


def errored_cells(
    traj: pd.DataFrame, errors: pd.DataFrame, reference: str, declared: dict | None = None
) -> tuple[list, list]:
    """(configurations, (configuration, domain) pairs) that `errors` touches among the compared
    decoders: their own error rows, and their reference's: the reference model's at their precision
    and attention or, for an engine pair (`declared`, from declared_references), the declared
    reference's."""
    declared = declared or {}
    compared = set(traj[CONFIG].astype(str).itertuples(index=False, name=None))
    compared |= {tuple(r[:4]) for r in errors[CONFIG].itertuples(index=False, name=None) if r[1] in COMPARED_DECODERS}
    cells = []
    for m, d, p, a, dom in errors[CONFIG + ["domain"]].itertuples(index=False, name=None):
        if d in COMPARED_DECODERS:
            cells.append((m, d, p, a, dom))
        if (m, d) == (reference, REFERENCE_DECODER):
            cells += [(*c, dom) for c in sorted(compared) if c[2:] == (p, a) and c not in declared]
        cells += [(*c, dom) for c, r in declared.items() if r == (m, d, p, a)]
    return sorted({c[:4] for c in cells}), cells


def pairwise_match(decode: pd.DataFrame) -> pd.DataFrame:
    """Match rate between every ordered pair of decoding results over their shared prompts."""
    configs = {}
    for key, g in decode.groupby(CONFIG, sort=True):
        configs[key] = dict(zip(g["prompt_id"], g["tokens"]))
    rows = []
    keys = list(configs)
    for ka in keys:
        a = configs[ka]
        for kb in keys:
            b = configs[kb]
            shared = a.keys() & b.keys()
            if not shared:
                continue
            k = sum(a[p] == b[p] for p in shared)
            rows.append(list(ka) + list(kb) + [len(shared), k / len(shared)])
    return pd.DataFrame(rows, columns=PAIRWISE_COLUMNS)


def decoders_table(overall: pd.DataFrame, decode: pd.DataFrame, fx: pd.DataFrame | None = None) -> pd.DataFrame:
    """How lossless is each decoder: the speculative decoders' and the controls' match rates
    (match_overall) side by side per precision and attention, with their mean tokens per model
    forward, the oracle's and the batched reference's match rates at the same cell, the verdicts
    of their first divergences (forensics rows `fx`) and the audit's word on each."""
    shown = SPECULATIVE + CONTROLS
    d = overall[overall["decoder"].isin(shown)]
    tpf = tpf_per_prompt(decode[decode["decoder"].isin(shown)]).groupby(CONFIG)["tpf_verify"].mean()
    d = d.merge(tpf.rename("tpf_verify").reset_index(), on=CONFIG, how="left")
    for control, column in (("oracle", "oracle_match_rate"), ("ar-batched", "batch_match_rate")):
        rates = overall[overall["decoder"] == control].groupby(["precision", "attention"])["match_rate"].first()
        d = d.merge(rates.rename(column).reset_index(), on=["precision", "attention"], how="left")
    by_cell = dict(list(fx.groupby(CONFIG)["verdict"])) if fx is not None and len(fx) else {}
    none = pd.Series(dtype=object)
    counts = [
        verdict_counts(by_cell.get(tuple(key), none), n=round(n * (1 - rate)))
        for key, n, rate in zip(d[CONFIG].itertuples(index=False), d["n"], d["match_rate"])
    ]
    d = pd.concat([d.reset_index(drop=True), pd.DataFrame(counts, columns=VERDICT_COUNTS)], axis=1)
    d["audit"] = [audit(r) for r in d.itertuples()]
    order = {k: i for i, k in enumerate(shown)}
    d = d.sort_values(
        ["precision", "attention", "decoder", "model"], key=lambda c: c.map(order) if c.name == "decoder" else c
    )
    return d[DECODERS_COLUMNS].reset_index(drop=True)


def audit(row) -> str:
    """The audit's word on one decoder cell (see orthrus/artefacts.py, TABLE_NOTES["decoders.csv"])."""
    if row.n and row.match_rate == 1:
        return "exact"
    if row.n_structural:
        return "not lossless"
    if row.n_no_verdict:
        return "unexplained"
    oracle = row.oracle_match_rate
    within = row.decoder in SPECULATIVE and not pd.isna(oracle) and row.ci_high >= oracle
    return "numerics, within its oracle" if within else "numerics"
