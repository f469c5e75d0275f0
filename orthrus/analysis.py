"""`orthrus analyze`: trajectory-match tables from decoding results.

    orthrus analyze --decode results/decode/*/*.parquet [--reference teacher]
                    [--ppl ppl.parquet] [--forensics forensics.parquet]
                    [--near-tie 0.125] --out-dir results/tables

Inputs are decoding-result Parquet files (see docs/DESIGN.md, "Decoding result"). Every
configuration (model, decoder in {orthrus, ar, assisted, prompt-lookup}, precision, attention)
is compared, prompt by prompt, with the plain AR reference (`decoder == "ar-ref"`, `model ==
--reference`) at the same precision and attention. The speculative decoders (Orthrus and
transformers' assisted and prompt-lookup decoding) get the per-decoder tables: tokens per
forward, perplexity by match, the logistic fit and the side-by-side `decoders.csv`.

Outputs (always all of them, so a workflow can declare them; tables whose optional input
was not given are written with their header only):

- `trajectories.parquet`   per prompt comparison rows (used by `orthrus figures`)
- `match_overall.csv`      exact-match rate with Wilson 95% CI (Tables 3 and 8)
- `match_by_domain.csv`    the same per domain (Table 4)
- `tpf_by_domain.csv`      tokens per forward of each speculative decoder (Table 2), per run
                           setting (message format, max_new_tokens; from --decode and --tpf-decode);
                           `tpf_authors` for Orthrus only (its loop has a separate prefill)
- `pairwise_match.csv`     match rate between every pair of decoding results
- `ppl_by_match.csv`       reference-response perplexity of matching vs diverging prompts
- `ppl_logit.csv`          logit P(match) ~ log PPL + length + C(domain), coefficient of log PPL
- `forensics.csv`          margins / layers at the first divergence, per configuration
- `forensics_rows.parquet` the forensics rows themselves (used by `orthrus figures`)
- `decoders.csv`           how lossless is each decoder: match rate (Wilson 95% CI) and mean tokens
                           per forward of orthrus, assisted and prompt-lookup side by side, per
                           precision and attention
- `uncertainty_by_domain.csv` the teacher's uncertainty along its fp32 greedy path, per domain:
                           mean next-token entropy and the share of steps whose top-1/top-2
                           margin is below the near-tie threshold (from the perplexity file)

Each CSV gets a Markdown twin (`orthrus.io.write_table`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from orthrus.contracts import (
    COMPARED_DECODERS,
    CONFIG,
    DECODERS_COLUMNS,
    ERRORS,
    FORENSICS_ROW_COLUMNS,
    FORENSICS_SUMMARY_COLUMNS,
    MATCH_BY_DOMAIN_COLUMNS,
    MATCH_OVERALL_COLUMNS,
    PAIRWISE_COLUMNS,
    PPL_BY_MATCH_COLUMNS,
    PPL_LOGIT_COLUMNS,
    REFERENCE_DECODER,
    SPECULATIVE,
    TABLES,
    TPF_COLUMNS,
    TPF_RUN,
    TRAJECTORY_COLUMNS,
    UNCERTAINTY_COLUMNS,
)
from orthrus.io import write_parquet, write_table
from orthrus.stats import (
    common_prefix_len,
    first_divergence,
    levenshtein,
    t_ci,
    t_halfwidth,
    wilson_ci,
)

DEFAULT_NEAR_TIE = 0.125

# Columns read from each input (subsets of the contracts in orthrus/contracts.py).
DECODE_REQUIRED = CONFIG + ["prompt_id", "domain", "tokens", "n_prefill", "n_diffusion", "n_verify"]
DECODE_OPTIONAL = ["finish_reason", "accepted", "env"]
PPL_REQUIRED = ["prompt_id", "ppl"]
FORENSICS_REQUIRED = FORENSICS_ROW_COLUMNS


class AnalysisError(ValueError):
    """Bad or missing input; the message names the file and the column."""


def _warn(msg: str) -> None:
    sys.stderr.write(f"orthrus analyze: {msg}\n")


# ---- loading ---------------------------------------------------------------------------
def _read_parquet_checked(path, required, optional=(), what="file") -> pd.DataFrame:
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{what} {path} does not exist")
    try:
        names = pq.read_schema(path).names
    except Exception as exc:  # not a Parquet file, truncated, ...
        raise AnalysisError(f"{what} {path} cannot be read as Parquet: {exc}") from exc
    missing = [c for c in required if c not in names]
    if missing:
        raise AnalysisError(
            f"{what} {path} lacks required column(s) {', '.join(map(repr, missing))} "
            f"(has: {', '.join(names)})"
        )
    cols = list(required) + [c for c in optional if c in names and c not in required]
    return pd.read_parquet(path, columns=cols)


def load_decode(paths) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Concatenate decoding results: (the rows kept, the error rows dropped (finish_reason == 'error'))."""
    if not paths:
        raise AnalysisError("no --decode files given")
    frames, errors = [], []
    seen: dict[tuple, Path] = {}
    for p in paths:
        df = _read_parquet_checked(p, DECODE_REQUIRED, DECODE_OPTIONAL, what="decoding result")
        for key in df[CONFIG].drop_duplicates().itertuples(index=False):
            key = tuple(key)
            if key in seen:
                raise AnalysisError(
                    f"decoding result {p}: configuration {dict(zip(CONFIG, key))} "
                    f"also appears in {seen[key]}"
                )
            seen[key] = Path(p)
        dup = df.duplicated(CONFIG + ["prompt_id"])
        if dup.any():
            raise AnalysisError(
                f"decoding result {p}: column 'prompt_id' has duplicates, e.g. "
                f"{df.loc[dup, 'prompt_id'].iloc[0]!r}"
            )
        if "finish_reason" in df.columns:
            err = df["finish_reason"].astype(str) == "error"
            if err.any():
                _warn(f"{p}: ignoring {int(err.sum())} prompt(s) with finish_reason == 'error'")
                e = df.loc[err, CONFIG + ["domain"]].copy()
                env = df.loc[err, "env"] if "env" in df.columns else pd.Series(None, index=e.index, dtype=object)
                e["message"] = [_env_setting(x, "message", "empty") for x in env]
                e["max_new_tokens"] = [_run_tokens(_env_setting(x, "max_new_tokens", None)) for x in env]
                errors.append(e)
                df = df.loc[~err]
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    for c in CONFIG + ["prompt_id", "domain"]:
        df[c] = df[c].astype(str)
    df["tokens"] = [tuple(int(t) for t in x) if x is not None else () for x in df["tokens"]]
    errors = (pd.concat(errors, ignore_index=True).astype(str) if errors
              else pd.DataFrame(columns=ERROR_COLUMNS))
    return df, errors


# an error row's configuration, domain and run setting (TPF_RUN, from its env record)
ERROR_COLUMNS = CONFIG + ["domain", "message", "max_new_tokens"]


def _run_tokens(value) -> str:
    """A run's max_new_tokens as the key error rows and TPF rows share ('' where unrecorded)."""
    return "" if value is None or pd.isna(value) else str(int(value))


def error_counts(name: str, table: pd.DataFrame, errors: pd.DataFrame, reference: str) -> list[int]:
    """Per row of a table: the decoding error rows it left out, those of its own configuration
    (the Orthrus decoder where the table has no decoder column; the reference at the scored
    precision and attention for the uncertainty table, whose perplexity forward skips them) and,
    where it compares with the reference, the reference's at the same precision and attention;
    per domain where it has one, and per run setting (message, max_new_tokens) in the TPF table."""
    counts = errors[ERROR_COLUMNS].value_counts().to_dict()  # (model, decoder, precision, attention, domain, message, max_new_tokens) -> n

    def n(model, decoder, precision, attention, domain=None, run=None):
        return sum(v for (m, d, p, a, dom, *r), v in counts.items()
                   if (m, d, p, a) == (model, decoder, precision, attention) and domain in (None, "all", dom)
                   and run in (None, tuple(r)))

    out = []
    for r in table.to_dict("records"):
        if name == "pairwise_match.csv":
            out.append(n(*(r[f"a_{c}"] for c in CONFIG)) + n(*(r[f"b_{c}"] for c in CONFIG)))
            continue
        if name == "uncertainty_by_domain.csv":
            out.append(n(reference, REFERENCE_DECODER, r["scored_precision"], r["scored_attention"], r["domain"]))
            continue
        if name == "tpf_by_domain.csv":
            out.append(n(r["model"], r.get("decoder", "orthrus"), r["precision"], r["attention"], r["domain"],
                         (str(r["message"]), _run_tokens(r["max_new_tokens"]))))
            continue
        own = n(r["model"], r.get("decoder", "orthrus"), r["precision"], r["attention"], r.get("domain"))
        out.append(own + n(reference, REFERENCE_DECODER, r["precision"], r["attention"], r.get("domain")))
    return out


def load_ppl(path, reference: str | None) -> pd.DataFrame:
    """Reference-response perplexities, reduced to one row per join key."""
    df = _read_parquet_checked(
        path, PPL_REQUIRED, ["n_tokens", "model", "precision", "attention"], what="perplexity file"
    )
    df["prompt_id"] = df["prompt_id"].astype(str)
    if "model" in df.columns and df["model"].nunique() > 1:
        if reference is None or reference not in set(df["model"].astype(str)):
            raise AnalysisError(
                f"perplexity file {path}: column 'model' holds several scorers "
                f"{sorted(df['model'].astype(str).unique())} and none is the reference {reference!r}"
            )
        df = df[df["model"].astype(str) == reference]
    keys = ["prompt_id"]
    for extra in ("precision", "attention"):
        if df.duplicated(keys).any() and extra in df.columns:
            df[extra] = df[extra].astype(str)
            keys.append(extra)
    if df.duplicated(keys).any():
        raise AnalysisError(
            f"perplexity file {path}: several rows per {'/'.join(keys)}; cannot tell which to use"
        )
    df = df[keys + ["ppl"]].copy()
    df["ppl"] = pd.to_numeric(df["ppl"], errors="coerce").astype(float)
    return df


def load_forensics(path) -> pd.DataFrame:
    df = _read_parquet_checked(path, FORENSICS_REQUIRED, what="forensics file")
    for c in CONFIG + ["prompt_id", "domain"]:
        df[c] = df[c].astype(str)
    for c in ("margin_native", "margin_fp32"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["position"] = pd.to_numeric(df["position"], errors="coerce").astype("Int64")
    df["first_layer_diverging"] = pd.to_numeric(df["first_layer_diverging"], errors="coerce").astype("Int64")
    return df[FORENSICS_ROW_COLUMNS].reset_index(drop=True)


# ---- trajectories ----------------------------------------------------------------------
def detect_reference(decode: pd.DataFrame) -> str:
    refs = sorted(decode.loc[decode["decoder"] == REFERENCE_DECODER, "model"].unique())
    if len(refs) != 1:
        raise AnalysisError(
            f"cannot infer the reference model: decoder {REFERENCE_DECODER!r} has models {refs}; "
            "pass --reference"
        )
    return refs[0]


def compare_trajectories(decode: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per-prompt comparison of every (model, decoder, precision, attention) with the reference."""
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
        r = ref[(ref["precision"] == precision) & (ref["attention"] == attention)]
        if r.empty:
            _warn(f"no reference {reference}/{REFERENCE_DECODER} at {precision}/{attention}; "
                  f"skipping {model}/{decoder}")
            continue
        rmap = dict(zip(r["prompt_id"], r["tokens"]))
        lost = 0
        for pid, dom, toks in zip(grp["prompt_id"], grp["domain"], grp["tokens"]):
            rt = rmap.get(pid)
            if rt is None:
                lost += 1
                continue
            div = first_divergence(toks, rt)
            rows.append(
                (model, decoder, precision, attention, reference, pid, dom, div is None,
                 div, common_prefix_len(toks, rt), levenshtein(toks, rt) if div is not None else 0,
                 len(toks), len(rt))
            )
        if lost:
            _warn(f"{model}/{decoder}/{precision}/{attention}: {lost} prompt(s) have no reference")
    out = pd.DataFrame(rows, columns=TRAJECTORY_COLUMNS[:-1])
    out["match"] = out["match"].astype(bool)
    out["first_divergence"] = pd.array(
        [None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)
         for v in out["first_divergence"]], dtype="Int64")
    for c in ("common_prefix_len", "levenshtein", "n_tokens", "ref_n_tokens"):
        out[c] = out[c].astype("int64")
    out["ppl"] = np.nan
    return out[TRAJECTORY_COLUMNS]


def attach_ppl(traj: pd.DataFrame, ppl: pd.DataFrame | None) -> pd.DataFrame:
    traj = traj.drop(columns="ppl")
    if ppl is None or ppl.empty:
        traj["ppl"] = np.nan
    else:
        keys = [k for k in ("prompt_id", "precision", "attention") if k in ppl.columns]
        traj = traj.merge(ppl[keys + ["ppl"]], on=keys, how="left")
        missing = traj["ppl"].isna() & traj["decoder"].isin(SPECULATIVE)
        if missing.any():
            _warn(f"{int(missing.sum())} speculative-decoder trajectory row(s) have no perplexity")
    return traj[TRAJECTORY_COLUMNS]


# ---- tables ----------------------------------------------------------------------------
def _rate_row(matches) -> dict:
    m = np.asarray(matches, dtype=bool)
    n, k = int(m.size), int(m.sum())
    low, high = wilson_ci(k, n)
    return {"n": n, "match_rate": k / n if n else math.nan, "ci_low": low, "ci_high": high}


def match_overall(traj: pd.DataFrame) -> pd.DataFrame:
    rows = [dict(zip(CONFIG, key), **_rate_row(g["match"])) for key, g in traj.groupby(CONFIG, sort=True)]
    return pd.DataFrame(rows, columns=MATCH_OVERALL_COLUMNS)


def match_by_domain(traj: pd.DataFrame) -> pd.DataFrame:
    keys = CONFIG + ["domain"]
    rows = [dict(zip(keys, key), **_rate_row(g["match"])) for key, g in traj.groupby(keys, sort=True)]
    return pd.DataFrame(rows, columns=MATCH_BY_DOMAIN_COLUMNS)


def _env_setting(env, key: str, default):
    try:
        return json.loads(env).get(key, default) if isinstance(env, str) else default
    except json.JSONDecodeError:
        return default


def tpf_per_prompt(d: pd.DataFrame) -> pd.DataFrame:
    """`d` with each prompt's tokens per forward: `tpf_verify` (over the model's forwards:
    prefill + verify), `tpf_all` (over every forward, the proposer's too: Orthrus's diffusion
    passes, the draft model's) and `tpf_authors` (orthrus.decoding.tpf_authors, Orthrus only:
    the formula counts a separate prefill, which transformers' assisted loop merges into its
    first verification)."""
    from orthrus.decoding import tpf_authors

    d = d.copy()
    acc = d["accepted"] if "accepted" in d.columns else pd.Series(None, index=d.index, dtype=object)
    ntok = np.array([len(t) for t in d["tokens"]], dtype=float)
    pre = pd.to_numeric(d["n_prefill"], errors="coerce").to_numpy(float)
    dif = pd.to_numeric(d["n_diffusion"], errors="coerce").to_numpy(float)
    ver = pd.to_numeric(d["n_verify"], errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        d["tpf_verify"] = np.where(pre + ver > 0, ntok / (pre + ver), np.nan)
        d["tpf_all"] = np.where(pre + dif + ver > 0, ntok / (pre + dif + ver), np.nan)
    d["tpf_authors"] = [tpf_authors(a) if a is not None and p > 0 and dec == "orthrus" else np.nan
                        for a, p, dec in zip(acc, pre, d["decoder"])]
    return d


def tpf_table(decode: pd.DataFrame) -> pd.DataFrame:
    """Tokens per forward of each speculative decoder (tpf_per_prompt), per run setting, per
    domain and over all prompts ('all')."""
    d = tpf_per_prompt(decode[decode["decoder"].isin(SPECULATIVE)])
    env = d["env"] if "env" in d.columns else pd.Series(None, index=d.index, dtype=object)
    d["message"] = [_env_setting(e, "message", "empty") for e in env]
    d["max_new_tokens"] = pd.array([_env_setting(e, "max_new_tokens", None) for e in env], dtype="Int64")
    rows = []
    keys = ["model", "decoder", "precision", "attention"] + TPF_RUN
    for key, g in d.groupby(keys, sort=True, dropna=False):
        parts = [(dom, gd) for dom, gd in g.groupby("domain", sort=True)] + [("all", g)]
        for dom, gd in parts:
            stats = {}
            for col in ("tpf_verify", "tpf_all", "tpf_authors"):
                v = gd[col].dropna()
                stats |= {col: t_ci(v)[0], f"{col}_ci": t_halfwidth(v)}
            rows.append(dict(zip(keys, key), domain=dom, n=len(gd), **stats))
    return pd.DataFrame(rows, columns=TPF_COLUMNS)


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


def ppl_by_match(traj: pd.DataFrame) -> pd.DataFrame:
    d = traj[traj["decoder"].isin(SPECULATIVE) & traj["ppl"].notna()]
    rows = []
    for key, g in d.groupby(CONFIG, sort=True):
        for matched in (True, False):
            v = g.loc[g["match"] == matched, "ppl"].to_numpy(float)
            mean, low, high = t_ci(v)
            rows.append(dict(zip(CONFIG, key), matched=matched,
                             n=int(v.size), mean_ppl=mean, ci_low=low, ci_high=high))
    return pd.DataFrame(rows, columns=PPL_BY_MATCH_COLUMNS)


def fit_ppl_logit(df: pd.DataFrame, alpha: float = 0.05, min_rows: int = 10) -> dict:
    """Fit `match ~ np.log(ppl) + length + C(domain)`; return beta1 (log PPL), its CI and p-value.

    `df` needs columns match (bool), ppl, length, domain. Never raises on data that cannot be
    estimated: the coefficients are NaN and `note` says why. Domains whose outcome is constant
    carry no information on beta1 (their dummy would diverge) and are dropped, with a note.
    """
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import PerfectSeparationError, PerfectSeparationWarning

    out = {"n": 0, "beta1": math.nan, "ci_low": math.nan, "ci_high": math.nan,
           "p_value": math.nan, "note": ""}
    d = df[["match", "ppl", "length", "domain"]].copy()
    d["ppl"] = pd.to_numeric(d["ppl"], errors="coerce").astype(float)
    d["length"] = pd.to_numeric(d["length"], errors="coerce").astype(float)
    d = d[np.isfinite(d["ppl"]) & (d["ppl"] > 0) & np.isfinite(d["length"])]
    d["match"] = d["match"].astype(bool).astype(int)
    d["domain"] = d["domain"].astype(str)
    out["n"] = int(len(d))
    notes = []

    def fail(reason):
        out["note"] = "; ".join(notes + [reason])
        return out

    if len(d) < min_rows:
        return fail(f"too few rows (n={len(d)} < {min_rows})")
    if d["match"].nunique() < 2:
        return fail("no variance in outcome: " + ("all matched" if d["match"].iloc[0] else "none matched"))
    const = d.groupby("domain")["match"].nunique() < 2
    if const.any():
        dropped = sorted(const[const].index)
        d = d[~d["domain"].isin(dropped)]
        notes.append(f"dropped {len(dropped)} domain(s) with constant outcome: {', '.join(dropped)}")
        if d["match"].nunique() < 2:
            return fail("no variance in outcome after dropping those domains")
    terms = ["np.log(ppl)"]
    if np.log(d["ppl"]).std() == 0 or d["ppl"].nunique() < 2:
        return fail("no variance in log(ppl)")
    if d["length"].nunique() > 1:
        terms.append("length")
    else:
        notes.append("length constant, term dropped")
    if d["domain"].nunique() > 1:
        terms.append("C(domain)")
    n_params = 1 + sum(t != "C(domain)" for t in terms)  # intercept + numeric terms
    if "C(domain)" in terms:
        n_params += d["domain"].nunique() - 1
    if len(d) < max(min_rows, n_params + 2):
        return fail(f"too few rows (n={len(d)}) for {n_params} parameters")
    formula = "match ~ " + " + ".join(terms)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence etc.: checked below
            warnings.simplefilter("error", PerfectSeparationWarning)  # takes precedence
            res = smf.logit(formula, data=d).fit(disp=0, maxiter=200)
    except (PerfectSeparationError, PerfectSeparationWarning):
        return fail("perfect separation")
    except np.linalg.LinAlgError as exc:
        return fail(f"singular design ({exc})")
    except Exception as exc:  # pragma: no cover - any other estimation failure
        return fail(f"fit failed: {type(exc).__name__}: {exc}")
    if not res.mle_retvals.get("converged", True):
        return fail("did not converge (likely quasi-separation)")
    name = "np.log(ppl)"
    beta, se = float(res.params[name]), float(res.bse[name])
    if not (math.isfinite(beta) and math.isfinite(se)):
        return fail("not estimable (non-finite coefficient or standard error)")
    ci = res.conf_int(alpha=alpha).loc[name]
    out.update(beta1=beta, ci_low=float(ci.iloc[0]), ci_high=float(ci.iloc[1]),
               p_value=float(res.pvalues[name]), n=int(len(d)))
    out["note"] = "; ".join(notes)
    return out


def ppl_logit(traj: pd.DataFrame) -> pd.DataFrame:
    d = traj[traj["decoder"].isin(SPECULATIVE) & traj["ppl"].notna()]
    rows = []
    for key, g in d.groupby(CONFIG, sort=True):
        fit = fit_ppl_logit(g.assign(length=g["ref_n_tokens"])[["match", "ppl", "length", "domain"]])
        rows.append(dict(zip(CONFIG, key), **fit))
    return pd.DataFrame(rows, columns=PPL_LOGIT_COLUMNS)


def decoders_table(overall: pd.DataFrame, decode: pd.DataFrame) -> pd.DataFrame:
    """How lossless is each decoder: the speculative decoders' match rates (match_overall) side
    by side per precision and attention, with their mean tokens per model forward."""
    d = overall[overall["decoder"].isin(SPECULATIVE)]
    tpf = tpf_per_prompt(decode[decode["decoder"].isin(SPECULATIVE)]).groupby(CONFIG)["tpf_verify"].mean()
    d = d.merge(tpf.rename("tpf_verify").reset_index(), on=CONFIG, how="left")
    order = {k: i for i, k in enumerate(SPECULATIVE)}
    d = d.sort_values(["precision", "attention", "decoder", "model"], key=lambda c: c.map(order) if c.name == "decoder" else c)
    return d[DECODERS_COLUMNS].reset_index(drop=True)


def forensics_summary(fx: pd.DataFrame, near_tie: float = DEFAULT_NEAR_TIE) -> pd.DataFrame:
    rows = []
    for key, g in fx.groupby(CONFIG, sort=True):
        m = g["margin_native"].dropna()
        layers = g["first_layer_diverging"].dropna()
        mode = None
        if len(layers):
            counts = layers.astype(int).value_counts()
            mode = int(min(counts[counts == counts.max()].index))
        rows.append(dict(zip(CONFIG, key), n_divergences=len(g),
                         median_margin_native=float(m.median()) if len(m) else math.nan,
                         median_margin_fp32=float(g["margin_fp32"].median()) if g["margin_fp32"].notna().any() else math.nan,
                         near_tie_threshold=float(near_tie),
                         frac_near_tie=float((m < near_tie).mean()) if len(m) else math.nan,
                         frac_exact_tie=float((m == 0).mean()) if len(m) else math.nan,
                         mode_first_layer=mode))
    out = pd.DataFrame(rows, columns=FORENSICS_SUMMARY_COLUMNS)
    out["mode_first_layer"] = out["mode_first_layer"].astype("Int64")
    return out


def uncertainty_by_domain(ppl_path, reference: str | None, near_tie: float = DEFAULT_NEAR_TIE) -> pd.DataFrame:
    """Per domain (and 'all'): the teacher's entropy and near-tie share along one greedy path per
    prompt, the highest-precision reference trajectory (fp32 where decoded; first attention)."""
    from orthrus.world.domains import UNCERTAINTY

    empty = pd.DataFrame(columns=UNCERTAINTY_COLUMNS)
    if ppl_path is None:
        return empty
    need = ["prompt_id", "domain", "entropy", "margins", "precision", "attention"]
    df = _read_parquet_checked(ppl_path, ["prompt_id"], need + ["model"], what="perplexity file")
    if any(c not in df.columns for c in need):
        _warn(f"{ppl_path}: no entropy/margins columns; uncertainty table left empty")
        return empty
    if reference is not None and "model" in df.columns:
        df = df[df["model"].astype(str) == reference]
    order = {"fp32": 0, "fp16": 1, "bf16": 2}
    best = min(df["precision"].astype(str), key=lambda p: order.get(p, 3), default=None)
    df = df[df["precision"].astype(str) == best]
    att = sorted(df["attention"].astype(str).unique())[:1]
    df = df[df["attention"].astype(str).isin(att)]
    rows = []
    parts = [(d, g) for d, g in df.groupby("domain", sort=True)] + [("all", df)]
    for dom, g in parts:
        margins = np.concatenate([np.asarray(m, dtype=float) for m in g["margins"]] or [np.zeros(0)])
        rows.append({"domain": dom, "declared": UNCERTAINTY.get(dom, ""), "n_prompts": len(g),
                     "n_steps": int(margins.size), "mean_entropy": float(g["entropy"].mean()),
                     "near_tie_share": float((margins < near_tie).mean()) if margins.size else math.nan,
                     # a trajectory can part at any of its near-ties: their count, not their share, sets the odds
                     "near_ties_per_prompt": float((margins < near_tie).sum() / len(g)) if len(g) else math.nan,
                     "near_tie_threshold": float(near_tie), "scored_precision": best,
                     "scored_attention": att[0] if att else ""})
    return pd.DataFrame(rows, columns=UNCERTAINTY_COLUMNS)


# ---- driver ----------------------------------------------------------------------------
def analyze(decode_paths, reference=None, ppl_path=None, forensics_path=None,
            near_tie: float = DEFAULT_NEAR_TIE, tpf_paths=()) -> dict[str, pd.DataFrame]:
    """Compute every table; returns {file name: DataFrame} (keys as in TABLES). `tpf_paths`:
    decoding results of a separate TPF run (Table 2), used for `tpf_by_domain.csv` only."""
    decode, errors = load_decode(decode_paths)
    tpf_decode, tpf_errors = decode, errors
    if tpf_paths:
        extra, extra_errors = load_decode(tpf_paths)
        tpf_decode = pd.concat([decode, extra], ignore_index=True)
        tpf_errors = pd.concat([errors, extra_errors], ignore_index=True)
    if reference is None:
        reference = detect_reference(decode)
    ppl = load_ppl(ppl_path, reference) if ppl_path is not None else None
    fx = load_forensics(forensics_path) if forensics_path is not None else None
    traj = attach_ppl(compare_trajectories(decode, reference), ppl)
    overall = match_overall(traj)
    empty_fx = pd.DataFrame({c: pd.Series(dtype=object) for c in FORENSICS_ROW_COLUMNS})
    tables = {
        "trajectories.parquet": traj,
        "match_overall.csv": overall,
        "match_by_domain.csv": match_by_domain(traj),
        "tpf_by_domain.csv": tpf_table(tpf_decode),
        "pairwise_match.csv": pairwise_match(decode),
        "ppl_by_match.csv": ppl_by_match(traj),
        "ppl_logit.csv": ppl_logit(traj),
        "forensics.csv": forensics_summary(fx if fx is not None else empty_fx.iloc[:0], near_tie),
        "forensics_rows.parquet": fx if fx is not None else empty_fx,
        "uncertainty_by_domain.csv": uncertainty_by_domain(ppl_path, reference, near_tie),
        "decoders.csv": decoders_table(overall, decode),
    }
    for name, df in tables.items():
        if name.endswith(".csv"):
            errs = tpf_errors if name == "tpf_by_domain.csv" else errors
            df[ERRORS] = pd.array(error_counts(name, df, errs, reference), dtype="int64")
    return tables


def write_tables(tables: dict[str, pd.DataFrame], out_dir) -> list[Path]:
    out_dir = Path(out_dir)
    written = []
    for name in TABLES:
        df = tables[name]
        path = out_dir / name
        if name.endswith(".parquet"):
            write_parquet(path, df)
        else:
            write_table(df, path)
        written.append(path)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus analyze", description=__doc__.split("\n\n")[0])
    ap.add_argument("--decode", nargs="+", required=True, metavar="PARQUET",
                    help="decoding-result Parquet files (all models, decoders, precisions)")
    ap.add_argument("--reference", default=None,
                    help="model name of the AR reference (decoder 'ar-ref'); inferred if unique")
    ap.add_argument("--ppl", default=None, metavar="PARQUET",
                    help="reference-response perplexities: prompt_id, ppl[, n_tokens, model, precision]")
    ap.add_argument("--forensics", default=None, metavar="PARQUET",
                    help="divergence forensics rows (orthrus forensics)")
    ap.add_argument("--tpf-decode", nargs="*", default=[], metavar="PARQUET",
                    help="decoding results of a separate TPF run (Table 2), for tpf_by_domain.csv only")
    ap.add_argument("--near-tie", type=float, default=DEFAULT_NEAR_TIE,
                    help="margin (logits) below which a divergence counts as a near-tie")
    ap.add_argument("--out-dir", required=True, help="directory for the tables")
    args = ap.parse_args(argv)
    try:
        tables = analyze(args.decode, args.reference, args.ppl, args.forensics, args.near_tie, args.tpf_decode)
    except AnalysisError as exc:
        sys.stderr.write(f"orthrus analyze: error: {exc}\n")
        return 2
    for p in write_tables(tables, args.out_dir):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
