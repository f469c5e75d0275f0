"""`orthrus engine-samples`: lossless in distribution for engines outside this package.

    orthrus engine-samples --export results/export/sampled.jsonl --model-path TEACHER
                           --entries JSON --alpha A --out results/tables/sampling_engines.csv

An engine pair (a speculative run and the same engine plain, both sampled) gets the two-sample test
the in-process loop gets (`orthrus.audit.two_sample.two_sample_test`, docs/SAMPLING.md). The sampled
export (`orthrus export-prompts --sampling`) holds the prompts of `sampling.two_sample`, each with
its sampling settings (`temperature`, `top_p`, `top_k`, `n_samples`, `max_new_tokens` = the test's m);
an engine writes one record per prompt with its `samples` (N lists of the first generated ids, each
stopped at a stop id or at m), and the engine's `seed` and sampling settings in `env` (docs/DESIGN.md,
"Sampled engine file"). `--entries` is the validated `sampling.engines` section: every entry with a
`reference` is tested against that entry's file, per prompt, Holm's correction over the pair's
prompts at family-wise level A; one row per (pair, prompt).

Refused, in one line naming the file, the line and the field: anything `orthrus ingest` refuses of a
record's shape, a prompt not in the sampled export or given twice (or one of the export's left out),
another number of samples than the export asks, a sample longer than m or cut before m without a stop
id, a token after a stop id, sampling settings in `env` other than the export's, and a pair whose two
files sampled a prompt with the same seed (their samples would not be independent).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import pandas as pd

from orthrus.contracts import ENGINE_TWO_SAMPLE_COLUMNS, ERRORS
from orthrus.engines.formats import SAMPLED_FIELDS, SAMPLED_REQUIRED
from orthrus.engines.jsonl_records import ExternalFileError, check_fields, file_lines, int_list, is_int, json_object

# the sampling settings a sampled file's env must state, each the export's
ENV_SETTINGS = ("temperature", "top_p", "top_k")


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)


def _env(where: str, env, export: dict) -> dict:
    if not isinstance(env, dict):
        raise ExternalFileError(f"{where}: field 'env': must be an object (engine, seed, {', '.join(ENV_SETTINGS)})")
    for k in ("engine", "seed") + ENV_SETTINGS:
        if k not in env:
            raise ExternalFileError(
                f"{where}: field 'env': key {k!r} missing (a sampled file states its engine, seed and "
                f"sampling settings: {', '.join(ENV_SETTINGS)}, null for none)"
            )
    if not is_int(env["seed"]):
        raise ExternalFileError(f"{where}: field 'env': key 'seed' must be an integer, got {env['seed']!r}")
    for k in ENV_SETTINGS:
        if not _same(env[k], export[k]):
            raise ExternalFileError(
                f"{where}: field 'env': {k} {env[k]!r}, but the sampled export asks {export[k]!r} "
                "(sample the export's settings: orthrus export-prompts --sampling)"
            )
    return env


def _samples(path, i: int, value, export: dict, vocab: int) -> list[list[int]]:
    where = f"{path}:{i}: field 'samples'"
    n, m, stop = export["n_samples"], export["max_new_tokens"], set(export["stop_token_ids"])
    if not isinstance(value, list) or len(value) != n:
        got = f"{len(value)} samples" if isinstance(value, list) else type(value).__name__
        raise ExternalFileError(f"{where}: must be a list of {n} samples (the export's n_samples), got {got}")
    out = []
    for j, sample in enumerate(value):
        tokens = int_list(path, i, f"samples[{j}]", sample, vocab)
        if len(tokens) > m:
            raise ExternalFileError(f"{where}: sample {j} has {len(tokens)} tokens, more than the export's {m}")
        cut = next((k for k, t in enumerate(tokens) if t in stop), None)
        if cut is not None and cut < len(tokens) - 1:
            raise ExternalFileError(f"{where}: sample {j} goes on after the stop id {tokens[cut]} at position {cut}")
        if cut is None and len(tokens) < m:
            raise ExternalFileError(
                f"{where}: sample {j} has {len(tokens)} tokens and no stop id: fewer than the export's {m} "
                "(sampled with another max_new_tokens?)"
            )
        out.append(tokens)
    return out


def read_samples(path, export: dict[str, dict], vocab: int) -> dict[str, tuple[list[list[int]], dict]]:
    """Per prompt of the sampled export, the samples in the file at `path` and the record's env."""
    out = {}
    for i, text in file_lines(path):
        rec, where = json_object(path, i, text), f"{path}:{i}"
        check_fields(where, rec, SAMPLED_REQUIRED, SAMPLED_FIELDS)
        pid = rec["prompt_id"]
        if not isinstance(pid, str) or pid not in export:
            raise ExternalFileError(
                f"{where}: field 'prompt_id': {pid!r} is not a prompt of the sampled export "
                "(orthrus export-prompts --sampling)"
            )
        if pid in out:
            raise ExternalFileError(f"{where}: field 'prompt_id': {pid!r} given twice")
        env = _env(where, rec["env"], export[pid])
        out[pid] = (_samples(path, i, rec["samples"], export[pid], vocab), env)
    if not out:
        raise ExternalFileError(f"{path}: no records")
    left = [p for p in export if p not in out]
    if left:
        raise ExternalFileError(f"{path}: prompt {left[0]!r} of the sampled export has no record ({len(left)} missing)")
    return out


def pair_rows(name: str, ref: str, files: dict, export: dict[str, dict], vocab: int, alpha: float) -> list[dict]:
    """One row per prompt of the sampled export: entry `name`'s samples against entry `ref`'s."""
    from orthrus.audit.two_sample import holm, two_sample_test

    spec, base = (read_samples(files[n], export, vocab) for n in (name, ref))
    rows = []
    for pid, e in export.items():
        (a, a_env), (b, b_env) = spec[pid], base[pid]
        if a_env["seed"] == b_env["seed"]:
            raise ExternalFileError(
                f"sampling.engines.{name}: prompt {pid!r} was sampled with env.seed {a_env['seed']} in {files[name]} "
                f"and in its reference {ref}'s file: the two arms must sample independently (a seed each)"
            )
        test = two_sample_test(a, b, e["max_new_tokens"])
        rows.append(
            {
                "engine": name,
                "reference": ref,
                "engine_seed": a_env["seed"],
                "reference_seed": b_env["seed"],
                # the vLLM functions corrected for the speculative arm (orthrus/engines/vllm_patches.py)
                "patches": "+".join(a_env.get("patches") or []) or "none",
                "prompt_id": pid,
                "domain": e["domain"],
                "temperature": e["temperature"],
                "top_p": 1.0 if e["top_p"] is None else float(e["top_p"]),
                "top_k": 0 if e["top_k"] is None else int(e["top_k"]),
                "n_samples": e["n_samples"],
                "m": e["max_new_tokens"],
                "p_first": float(test["p_positions"][0]),
                "p_prefix": test["p_prefix"],
                "p_value": test["p_value"],
                "alpha": alpha,
            }
        )
    reject = holm([r["p_value"] for r in rows], alpha)
    for r, rej in zip(rows, reject):
        r |= {"rejected": bool(rej), "n_prompts": len(rows), "n_rejected": int(sum(reject))}
    return rows


def engine_table(entries: dict, export: dict[str, dict], vocab: int, alpha: float) -> pd.DataFrame:
    """Every engine pair of `entries` (sampling.engines: an entry with a `reference`)."""
    files = {n: e["path"] for n, e in entries.items()}
    for n, e in entries.items():
        if e.get("reference") and e["reference"] not in entries:
            raise ExternalFileError(
                f"sampling.engines.{n}.reference: {e['reference']!r} is not an entry of sampling.engines"
            )
    rows = [
        r
        for n, e in entries.items()
        if e.get("reference")
        for r in pair_rows(n, e["reference"], files, export, vocab, alpha)
    ]
    df = pd.DataFrame(rows, columns=ENGINE_TWO_SAMPLE_COLUMNS)
    df[ERRORS] = 0  # a bad record fails the job: no rows are left out
    return df


def read_export(path) -> dict[str, dict]:
    """The sampled export by prompt id."""
    out = {}
    for i, text in file_lines(path):
        rec = json_object(path, i, text)
        if "n_samples" not in rec:
            raise ExternalFileError(
                f"{path}:{i}: not a sampled export (no n_samples): orthrus export-prompts --sampling"
            )
        out[rec["prompt_id"]] = rec
    return out


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoConfig, AutoTokenizer

    from orthrus.errors import InputError
    from orthrus.io import write_table
    from orthrus.models.files import resolve_checkpoint

    ap = argparse.ArgumentParser(prog="orthrus engine-samples", description=__doc__.split("\n")[0])
    ap.add_argument("--export", required=True, help="the sampled export (orthrus export-prompts --sampling)")
    ap.add_argument("--model-path", required=True, help="the reference model (teacher): its vocabulary")
    ap.add_argument("--entries", required=True, help="the validated sampling.engines section as JSON")
    ap.add_argument("--alpha", type=float, default=0.05, help="family-wise level of Holm's correction per pair")
    ap.add_argument("--out", required=True, help="the table (CSV, with a Markdown twin)")
    args = ap.parse_args(argv)
    try:
        entries = json.loads(args.entries)
    except json.JSONDecodeError as e:
        raise InputError(f"--entries is not valid JSON ({e})") from None
    path = resolve_checkpoint(args.model_path)
    # the ids a sampler can draw: the model's output rows, which may outnumber the tokenizer's (padded)
    vocab = max(len(AutoTokenizer.from_pretrained(path)), AutoConfig.from_pretrained(path).vocab_size)
    table = engine_table(entries, read_export(args.export), vocab, args.alpha)
    write_table(table, args.out)
    pairs = table.groupby("engine")["n_rejected"].first().to_dict()
    print(f"[engine-samples] {len(table)} tests, rejected per pair: {pairs} -> {args.out}", file=sys.stderr)
    return 0
