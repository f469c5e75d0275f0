"""Reading and checking `orthrus analyze`'s inputs, and counting the decoding error rows each
table left out.

Inputs: decoding results, the perplexity file and the forensics rows (docs/DESIGN.md). A bad
input is an `AnalysisError` whose message names the file and the column.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from orthrus.contracts import CONFIG, FORENSICS_ROW_COLUMNS, REFERENCE_DECODER, TPF_RUN
from orthrus.errors import InputError
from orthrus.options import DecodeOptions, env_record

# Columns read from each input (subsets of the contracts in orthrus/contracts.py).
DECODE_REQUIRED = CONFIG + ["prompt_id", "domain", "tokens", "n_prefill", "n_diffusion", "n_verify"]
DECODE_OPTIONAL = ["finish_reason", "accepted", "env", "seconds"]
PPL_REQUIRED = ["prompt_id", "ppl"]
FORENSICS_REQUIRED = FORENSICS_ROW_COLUMNS
# an error row's configuration, domain and run setting (TPF_RUN, from its env record)
ERROR_COLUMNS = CONFIG + ["domain"] + TPF_RUN


class AnalysisError(InputError):
    """Bad or missing input; the message names the file and the column."""


def warn(msg: str) -> None:
    sys.stderr.write(f"orthrus analyze: {msg}\n")


def read_parquet_checked(path, required, optional=(), what="file") -> pd.DataFrame:
    """The `required` and present `optional` columns of a Parquet file; AnalysisError when the
    file is missing, unreadable or lacks a required column."""
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
            f"{what} {path} lacks required column(s) {', '.join(map(repr, missing))} (has: {', '.join(names)})"
        )
    cols = list(required) + [c for c in optional if c in names and c not in required]
    return pd.read_parquet(path, columns=cols)


def run_tokens(value) -> str:
    """A run's max_new_tokens as the key error rows and TPF rows share ('' where unrecorded)."""
    return "" if value is None or pd.isna(value) else str(int(value))


def _check_unique(df: pd.DataFrame, path, seen: dict[tuple, Path]) -> None:
    """Each configuration in one file only, each prompt once per configuration."""
    for key in df[CONFIG].drop_duplicates().itertuples(index=False):
        key = tuple(key)
        if key in seen:
            raise AnalysisError(
                f"decoding result {path}: configuration {dict(zip(CONFIG, key))} also appears in {seen[key]}"
            )
        seen[key] = Path(path)
    dup = df.duplicated(CONFIG + ["prompt_id"])
    if dup.any():
        raise AnalysisError(
            f"decoding result {path}: column 'prompt_id' has duplicates, e.g. {df.loc[dup, 'prompt_id'].iloc[0]!r}"
        )


def _error_rows(df: pd.DataFrame, err: pd.Series) -> pd.DataFrame:
    """The ERROR_COLUMNS of the rows `err` selects."""
    e = df.loc[err, CONFIG + ["domain"]].copy()
    run = run_settings(df.loc[err])
    e["message"] = run["message"]
    e["max_new_tokens"] = [run_tokens(x) for x in run["max_new_tokens"]]
    return e


def run_settings(df: pd.DataFrame) -> pd.DataFrame:
    """The run settings of TPF_RUN (message, max_new_tokens) of each decoding row, from the
    options its `env` records (`DecodeOptions.from_row`, once per distinct record: a file's rows
    share one). A row that records no token budget (written before the options were recorded) has
    none (None), not the default's."""
    env = df["env"] if "env" in df.columns else pd.Series(None, index=df.index, dtype=object)
    keys = list(zip(env, df["decoder"], df["precision"], df["attention"]))
    settings = {}
    for key in dict.fromkeys(keys):
        o = DecodeOptions.from_row(*key)
        record = env_record(key[0])
        settings[key] = (o.message, o.max_new_tokens if "options" in record or "max_new_tokens" in record else None)
    return pd.DataFrame([settings[k] for k in keys], columns=["message", "max_new_tokens"], index=df.index)


def load_decode(paths) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Concatenate decoding results: (the rows kept, the error rows dropped (finish_reason == 'error'))."""
    if not paths:
        raise AnalysisError("no --decode files given")
    frames, errors = [], []
    seen: dict[tuple, Path] = {}
    for p in paths:
        df = read_parquet_checked(p, DECODE_REQUIRED, DECODE_OPTIONAL, what="decoding result")
        _check_unique(df, p, seen)
        if "finish_reason" in df.columns:
            err = df["finish_reason"].astype(str) == "error"
            if err.any():
                warn(f"{p}: ignoring {int(err.sum())} prompt(s) with finish_reason == 'error'")
                errors.append(_error_rows(df, err))
                df = df.loc[~err]
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    for c in CONFIG + ["prompt_id", "domain"]:
        df[c] = df[c].astype(str)
    df["tokens"] = [tuple(int(t) for t in x) if x is not None else () for x in df["tokens"]]
    errors = pd.concat(errors, ignore_index=True).astype(str) if errors else pd.DataFrame(columns=ERROR_COLUMNS)
    return df, errors


def error_counts(
    name: str, table: pd.DataFrame, errors: pd.DataFrame, reference: str, declared: dict | None = None
) -> list[int]:
    """Per row of a table: the decoding error rows it left out, those of its own configuration
    (the Orthrus decoder where the table has no decoder column; the reference at the scored
    precision and attention for the uncertainty table, whose perplexity forward skips them) and,
    where it compares with the reference, the reference's at the same precision and attention (for
    an engine pair, `declared` maps its configuration to its reference's); per domain where it has
    one, and per run setting (message, max_new_tokens) in the TPF table."""
    declared = declared or {}
    counts = (
        errors[ERROR_COLUMNS].value_counts().to_dict()
    )  # (model, decoder, precision, attention, domain, message, max_new_tokens) -> n

    def n(model, decoder, precision, attention, domain=None, run=None):
        return sum(
            v
            for (m, d, p, a, dom, *r), v in counts.items()
            if (m, d, p, a) == (model, decoder, precision, attention)
            and domain in (None, "all", dom)
            and run in (None, tuple(r))
        )

    out = []
    for r in table.to_dict("records"):
        if name == "pairwise_match.csv":
            out.append(n(*(r[f"a_{c}"] for c in CONFIG)) + n(*(r[f"b_{c}"] for c in CONFIG)))
            continue
        if name == "uncertainty_by_domain.csv":
            out.append(n(reference, REFERENCE_DECODER, r["scored_precision"], r["scored_attention"], r["domain"]))
            continue
        if name == "tpf_by_domain.csv":
            out.append(
                n(
                    r["model"],
                    r.get("decoder", "orthrus"),
                    r["precision"],
                    r["attention"],
                    r["domain"],
                    (str(r["message"]), run_tokens(r["max_new_tokens"])),
                )
            )
            continue
        key = (r["model"], r.get("decoder", "orthrus"), r["precision"], r["attention"])
        own = n(*key, r.get("domain"))
        ref = declared.get(key, (reference, REFERENCE_DECODER, r["precision"], r["attention"]))
        out.append(own + n(*ref, r.get("domain")))
    return out


def load_ppl(path, reference: str | None) -> pd.DataFrame:
    """Reference-response perplexities, reduced to one row per join key."""
    df = read_parquet_checked(
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
        raise AnalysisError(f"perplexity file {path}: several rows per {'/'.join(keys)}; cannot tell which to use")
    df = df[keys + ["ppl"]].copy()
    df["ppl"] = pd.to_numeric(df["ppl"], errors="coerce").astype(float)
    return df


def load_pair_ppl(path, references) -> pd.DataFrame:
    """The perplexities of the external decoders that engine pairs declare as their reference
    (`references`: their names, the perplexity file's `model`): `reference`, `prompt_id`, `ppl`."""
    df = read_parquet_checked(path, PPL_REQUIRED, ["model"], what="perplexity file")
    if "model" not in df.columns or not references:
        return pd.DataFrame(columns=["reference", "prompt_id", "ppl"])
    df = df[df["model"].astype(str).isin(set(references))]
    out = pd.DataFrame(
        {
            "reference": df["model"].astype(str),
            "prompt_id": df["prompt_id"].astype(str),
            "ppl": pd.to_numeric(df["ppl"], errors="coerce").astype(float),
        }
    )
    return out.drop_duplicates(["reference", "prompt_id"]).reset_index(drop=True)


def load_forensics(path) -> pd.DataFrame:
    """The forensics rows the tables use (FORENSICS_ROW_COLUMNS), typed."""
    df = read_parquet_checked(path, FORENSICS_REQUIRED[:-3], FORENSICS_REQUIRED[-3:], what="forensics file")
    for c in FORENSICS_REQUIRED[-3:]:  # files written before the verdicts existed: no verdict
        if c not in df.columns:
            df[c] = None
    for c in CONFIG + ["prompt_id", "domain"]:
        df[c] = df[c].astype(str)
    for c in ("margin_native", "margin_fp32", "gap_ulps"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["position"] = pd.to_numeric(df["position"], errors="coerce").astype("Int64")
    df["first_layer_diverging"] = pd.to_numeric(df["first_layer_diverging"], errors="coerce").astype("Int64")
    return df[FORENSICS_ROW_COLUMNS].reset_index(drop=True)
