"""`orthrus analyze`: trajectory-match tables from decoding results.

    orthrus analyze --decode results/decode/*/*.parquet [--reference teacher]
                    [--ppl ppl.parquet] [--forensics forensics.parquet]
                    [--near-tie 0.125] --out-dir results/tables

Inputs are decoding-result Parquet files (see docs/DESIGN.md, "Decoding result"). Every
configuration (model, decoder in {orthrus, ar, assisted, prompt-lookup, the controls, external},
precision, attention) is compared, prompt by prompt, with the plain AR reference (`decoder ==
"ar-ref"`, `model == --reference`) at the same precision and attention; an external decoder whose
rows declare a reference (an engine pair, decode.external's `reference`) with that decoder's
trajectories instead. The speculative decoders (Orthrus, transformers' assisted and prompt-lookup
decoding, an engine's file) get the per-decoder tables: tokens per forward, perplexity by match,
the logistic fit and the side-by-side `decoders.csv`.

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
- `ppl_logit.csv`          logit P(match) ~ log PPL + length + C(domain), coefficient of log PPL,
                           and the fitted curve against PPL that `orthrus figures` draws
- `forensics.csv`          margins / layers / verdicts at the first divergence, per configuration
- `forensics_rows.parquet` the forensics rows themselves (used by `orthrus figures`)
- `decoders.csv`           how lossless is each decoder: match rate (Wilson 95% CI) and mean tokens
                           per forward of orthrus, assisted, prompt-lookup and the controls side by
                           side, per precision and attention, with the oracle's match rate, the
                           batched reference's, the verdicts of the first divergences and the audit
- `engine_widths.csv`      each engine run that speculated, by method and draft width k: match rate
                           against its reference, where its divergences first fall, tokens per forward
- `load.csv`               each server run of the OpenAI engine at its concurrency: match rate against
                           the same server at concurrency 1, the verdicts of its divergences, and the
                           distinct completions per prompt over its repeats
- `uncertainty_by_domain.csv` the teacher's uncertainty along its fp32 greedy path, per domain:
                           mean next-token entropy and the share of steps whose top-1/top-2
                           margin is below the near-tie threshold (from the perplexity file)

Each CSV gets a Markdown twin (`orthrus.io.write_table`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from orthrus.analysis.load import error_counts, load_decode, load_forensics, load_pair_ppl, load_ppl
from orthrus.analysis.load_invariance import load_table
from orthrus.analysis.match import (
    attach_ppl,
    compare_trajectories,
    declared_references,
    decoders_table,
    detect_reference,
    errored_cells,
    match_by_domain,
    match_overall,
    pairwise_match,
    with_rows,
)
from orthrus.analysis.ppl import ppl_by_match, ppl_logit
from orthrus.analysis.tpf import speed_table, tpf_table
from orthrus.analysis.uncertainty import DEFAULT_NEAR_TIE, forensics_summary, uncertainty_by_domain
from orthrus.analysis.widths import engine_widths
from orthrus.audit.verdict import ROUNDING_ULPS, rounding_ulps_arg
from orthrus.contracts import CONFIG, ERRORS, FORENSICS_ROW_COLUMNS, SPECULATIVE, TABLES, TPF_RUN
from orthrus.io import write_parquet, write_table


def analyze(
    decode_paths,
    reference=None,
    ppl_path=None,
    forensics_path=None,
    near_tie: float = DEFAULT_NEAR_TIE,
    tpf_paths=(),
    declared: bool = False,
    rounding_ulps: float | dict = ROUNDING_ULPS,
) -> dict[str, pd.DataFrame]:
    """Compute every table; returns {file name: DataFrame} (keys as in TABLES). `tpf_paths`:
    decoding results of a separate TPF run (Table 2), used for `tpf_by_domain.csv` only.
    `declared`: the prompts are the tiny world's, so its declared uncertainty per domain applies
    (the authors' domains share some names but not the claims)."""
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
    # engine pairs (decode.external's `reference`): compared with, and error-counted by, their declared reference
    pairs = declared_references(decode, errors)
    pair_ppl = load_pair_ppl(ppl_path, {r[0] for r in pairs.values()}) if ppl_path is not None else None
    traj = attach_ppl(compare_trajectories(decode, reference), ppl, pair_ppl)
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
        "forensics.csv": forensics_summary(fx if fx is not None else empty_fx.iloc[:0], near_tie, rounding_ulps),
        "forensics_rows.parquet": fx if fx is not None else empty_fx,
        "uncertainty_by_domain.csv": uncertainty_by_domain(ppl_path, reference, near_tie, declared),
        "decoders.csv": decoders_table(overall, decode, fx),
        "engine_widths.csv": engine_widths(traj, decode),
        "speed.csv": speed_table(decode),
        "load.csv": load_table(traj, decode, fx),
    }
    # a configuration or a domain whose every prompt errored keeps its row, with its error count
    configs, cells = errored_cells(traj, errors, reference, pairs)
    tables["match_overall.csv"] = with_rows(overall, CONFIG, configs)
    tables["match_by_domain.csv"] = with_rows(tables["match_by_domain.csv"], CONFIG + ["domain"], cells)
    tpf_keys = CONFIG + TPF_RUN + ["domain"]
    spec = tpf_errors[tpf_errors["decoder"].isin(SPECULATIVE)] if len(tpf_errors) else tpf_errors
    run = [
        (*r[:5], pd.NA if r[5] == "" else int(r[5])) for r in spec[CONFIG + TPF_RUN].itertuples(index=False, name=None)
    ]
    tables["tpf_by_domain.csv"] = with_rows(
        tables["tpf_by_domain.csv"], tpf_keys, [(*r, dom) for r, d in zip(run, spec["domain"]) for dom in (d, "all")]
    )
    for name, df in tables.items():
        if name.endswith(".csv"):
            errs = tpf_errors if name == "tpf_by_domain.csv" else errors
            df[ERRORS] = pd.array(error_counts(name, df, errs, reference, pairs), dtype="int64")
    return tables


def write_tables(tables: dict[str, pd.DataFrame], out_dir) -> list[Path]:
    """Write every table of TABLES (Parquet, or CSV with a Markdown twin) atomically."""
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
    ap.add_argument(
        "--decode",
        nargs="+",
        required=True,
        metavar="PARQUET",
        help="decoding-result Parquet files (all models, decoders, precisions)",
    )
    ap.add_argument(
        "--reference", default=None, help="model name of the AR reference (decoder 'ar-ref'); inferred if unique"
    )
    ap.add_argument(
        "--ppl",
        default=None,
        metavar="PARQUET",
        help="reference-response perplexities: prompt_id, ppl[, n_tokens, model, precision]",
    )
    ap.add_argument(
        "--forensics", default=None, metavar="PARQUET", help="divergence forensics rows (orthrus forensics)"
    )
    ap.add_argument(
        "--world-domains",
        action="store_true",
        help="the prompts are the tiny world's: fill uncertainty_by_domain.csv's `declared` column",
    )
    ap.add_argument(
        "--tpf-decode",
        nargs="*",
        default=[],
        metavar="PARQUET",
        help="decoding results of a separate TPF run (Table 2), for tpf_by_domain.csv only",
    )
    ap.add_argument(
        "--near-tie",
        type=float,
        default=DEFAULT_NEAR_TIE,
        help="margin (logits) below which a divergence counts as a near-tie",
    )
    ap.add_argument(
        "--rounding-ulps",
        type=rounding_ulps_arg,
        default=dict(ROUNDING_ULPS),
        help="reference margin, in ulps of the logits' magnitude, that rounding explains (the verdicts' "
        "bound): one number or precision=ulps,...",
    )
    ap.add_argument("--out-dir", required=True, help="directory for the tables")
    args = ap.parse_args(argv)
    tables = analyze(
        args.decode,
        args.reference,
        args.ppl,
        args.forensics,
        args.near_tie,
        args.tpf_decode,
        args.world_domains,
        args.rounding_ulps,
    )
    for p in write_tables(tables, args.out_dir):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
