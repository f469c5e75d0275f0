"""Trajectories an engine outside this package decoded, as a decoder of the study (decode.external).

    orthrus ingest --file TRAJ.jsonl --name NAME --prompts eval.parquet --model-path TEACHER
                   --options JSON [--reference NAME2] --out results/decode/NAME/external-P-A.parquet

An engine (vLLM, SGLang, TensorRT-LLM, llama.cpp, a research loop) decodes the exported prompts
(`orthrus export-prompts`) and writes one JSON object per line and prompt (docs/DESIGN.md, "External
trajectory file"; docs/EXTERNAL.md does it with vLLM and SGLang). This stage checks the file against
the study's prompt set and the reference model's tokenizer and writes it as a decoding result
(DECODE_COLUMNS; decoder `external`, model NAME), so every later stage takes it as it takes any
decoder: the match tables, the pairwise matrix, tokens per forward where the file gives counts,
the perplexity analysis, the forensics at the first divergence (scored by the in-process reference)
and the verdicts. Nothing here decodes.

Each line must be a JSON object (a line cut short is reported at the column where it was cut)
and each record pass the checks of orthrus/engines/record_checks.py, each failing in one line
naming the file, the line and the field (an InputError); so does a prompt id given twice, and
records ending before max_new_tokens without a stop id in bulk (EARLY_MIN and more than
EARLY_SHARE of the records): the file was decoded with another token budget. What is
not an error is kept and counted: a prompt of the set without a record becomes an error row
(`Missing: ...`, in every table's n_errors_excluded), an engine's own failure (finish_reason
other than stop, eos or length) too; a few trajectories that end before the budget without a
stop id (and without a finish_reason), or go on past one, are kept as the engine emitted them
(they diverge where they part from the reference) and counted in the job's report.

The cell (precision, attention) a file joins is the config entry's `precision` and `attention`
where given, else its first record's `env.dtype` and `env.kernel` (`cell`, which the workflow calls
while it is parsed): the attention names the in-process kernel the file is compared with, so an
engine's own kernel (FlashAttention, FlashInfer, ...) needs the entry's `attention`.

With `--reference NAME2` (the entry's `reference`: the engine's own plain-AR run, another entry),
the rows record it (`env.external.reference`) and `orthrus analyze` compares them with NAME2's
trajectories instead of the in-process `ar-ref`; the in-process model still scores the margins and
the perplexity.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from orthrus.contracts import ATTENTIONS, DECODE_COLUMNS, EXTERNAL_DECODER
from orthrus.decode.trajectory import Trajectory, decoding_row
from orthrus.engines.jsonl_records import ExternalFileError, file_lines, json_object
from orthrus.engines.record_checks import DTYPES, REEXPORT, StudyInputs, check_record, precision_of
from orthrus.options import DecodeOptions

# Records ending before max_new_tokens without a stop id (and without a finish_reason to say why): a
# few are the engine's own (a stop string, its context limit) and are kept; this many in bulk say the
# file was decoded with another token budget, and fail the ingest.
EARLY_MIN, EARLY_SHARE = 2, 0.05


def first_env(path) -> dict | None:
    """The `env` object of the first record of `path`; None where the file does not exist yet."""
    if not Path(path).is_file():
        return None
    for i, text in file_lines(path):
        env = json_object(path, i, text).get("env")
        if not isinstance(env, dict):
            raise ExternalFileError(
                f"{path}:{i}: field 'env': must be an object (engine, version, dtype, kernel, batch_size, device)"
            )
        return env
    raise ExternalFileError(f"{path}: no records")


def cell(name: str, entry: dict) -> tuple[str, str]:
    """(precision, attention) of the decode.external entry `name`: the entry's, else its file's
    first `env.dtype` / `env.kernel`; an error naming the key to set where neither says."""
    precision, attention = entry.get("precision"), entry.get("attention")
    if precision and attention:
        return precision, attention
    env = first_env(entry["path"])
    key = f"decode.external.{name}"
    if env is None:
        raise ExternalFileError(
            f"{key}.path: {entry['path']} does not exist yet, so its env cannot say its cell: "
            f"set {key}.precision and {key}.attention"
        )
    if not precision:
        precision = precision_of(env.get("dtype")) if env.get("dtype") is not None else None
        if precision is None:
            raise ExternalFileError(
                f"{key}.precision: not set, and the first record of {entry['path']} has env.dtype "
                f"{env.get('dtype')!r}, none of {', '.join(DTYPES)}: set it"
            )
    if not attention:
        attention = env.get("kernel") if env.get("kernel") in ATTENTIONS else None
        if attention is None:
            raise ExternalFileError(
                f"{key}.attention: not set, and the first record of {entry['path']} has env.kernel "
                f"{env.get('kernel')!r}, not one of the in-process kernels {', '.join(ATTENTIONS)}: "
                "set it to the kernel of the reference to compare with"
            )
    return precision, attention


def _early_in_bulk(path, records: dict, options: DecodeOptions) -> None:
    """Fail where many records end before max_new_tokens without a stop id (EARLY_MIN, EARLY_SHARE)."""
    early = [r for r in records.values() if r["early"]]
    if len(early) >= EARLY_MIN and len(early) > EARLY_SHARE * len(records):
        first = min(early, key=lambda r: r["line"])
        lengths = sorted({len(r["trajectory"].tokens) for r in early})
        raise ExternalFileError(
            f"{path}:{first['line']}: field 'token_ids': {len(first['trajectory'].tokens)} tokens, no stop id, fewer than the study's "
            f"max_new_tokens {options.max_new_tokens}, and so end {len(early)} of {len(records)} records (lengths "
            f"{lengths[0]}..{lengths[-1]}): decoded with another token budget (prompts exported with another "
            f"--max-new-tokens, whose default is {DecodeOptions.max_new_tokens}?); {REEXPORT}"
        )


def read_records(path, study: StudyInputs) -> dict[str, dict]:
    """prompt id -> checked record of every line of `path`; a prompt id given twice fails naming both lines."""
    records = {}
    for i, text in file_lines(path):
        r = check_record(path, i, json_object(path, i, text), study)
        if r["prompt_id"] in records:
            raise ExternalFileError(
                f"{path}:{i}: field 'prompt_id': {r['prompt_id']!r} is given twice (first on line "
                f"{records[r['prompt_id']]['line']})"
            )
        records[r["prompt_id"]] = r
    return records


def ingest(path, name: str, prompts, tokenizer, options: DecodeOptions, stop: list[int], reference: str | None = None):
    """The decoding result (DECODE_COLUMNS) of the trajectory file `path` as decoder `external`,
    model `name`, one row per prompt of `prompts` in its order (a prompt without a record an
    error row); and a report of what was counted, for the job's log."""
    import pandas as pd

    if options.decoder != EXTERNAL_DECODER:
        raise ExternalFileError(f"--options: an engine's file is decoder {EXTERNAL_DECODER}, got {options.decoder}")
    study = StudyInputs(prompts, tokenizer, options, stop)
    records = read_records(path, study)
    _early_in_bulk(path, records, options)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    base = {"model": name, "decoder": EXTERNAL_DECODER, "precision": options.precision, "attention": options.attention}
    rows = []
    for pid in study.order:
        r = records.get(pid)
        source = {
            "name": name,
            "file": str(path),
            "sha256": digest,
            "reference": reference,
            "line": r["line"] if r else None,
        }
        env = {"loop": "external", "options": options.record(), "external": source}
        if r is None:
            trajectory = Trajectory.failed(f"Missing: {path} has no record for this prompt")
        else:
            trajectory = r["trajectory"]
            env |= {"engine_env": r["engine_env"]} | ({"extra": r["extra"]} if r["extra"] is not None else {})
            if (
                r["logprobs"] is not None
            ):  # the engine's own top 2 per position, for the verdicts (orthrus.audit.forensics)
                env["engine_logprobs"] = r["logprobs"]
        prompt_len = len(study.prompt_ids[pid])
        rows.append(decoding_row(base, pid, study.domain[pid], prompt_len, json.dumps(env, sort_keys=True), trajectory))
    df = pd.DataFrame(rows, columns=DECODE_COLUMNS)
    kept = list(records.values())
    report = {
        "records": len(records),
        "missing": len(study.order) - len(records),
        "engine_errors": sum(r["trajectory"].finish_reason == "error" for r in kept),
        "ended_early": sum(r["early"] for r in kept),
        "past_stop": sum(r["past_stop"] for r in kept),
    }
    return df, report


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    from orthrus.data.prompt_set import read_prompt_set
    from orthrus.engines.export_prompts import stop_ids
    from orthrus.io import write_parquet
    from orthrus.models.files import resolve_checkpoint

    ap = argparse.ArgumentParser(prog="orthrus ingest", description=__doc__.split("\n")[0])
    ap.add_argument("--file", required=True, help="the engine's trajectory file (JSON Lines)")
    ap.add_argument("--name", required=True, help="the decoder's name in the tables (its `model` column)")
    ap.add_argument("--prompts", required=True, help="evaluation prompts (Parquet: prompt_id, domain, prompt)")
    ap.add_argument("--model-path", required=True, help="the reference model (teacher): its tokenizer and stop ids")
    ap.add_argument("--options", required=True, help="the cell's DecodeOptions JSON (decoder external)")
    ap.add_argument("--reference", help="the external decoder (an engine's own plain-AR run) to compare with")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    options = DecodeOptions.from_json(args.options)
    path = resolve_checkpoint(args.model_path)
    df, report = ingest(
        args.file,
        args.name,
        read_prompt_set(args.prompts),
        AutoTokenizer.from_pretrained(path),
        options,
        stop_ids(path),
        args.reference,
    )
    write_parquet(args.out, df)
    print(
        f"[ingest] {args.name}: {report['records']} records of {len(df)} prompts; {report['missing']} prompts missing "
        f"and {report['engine_errors']} engine failures (error rows); {report['ended_early']} ended before "
        f"max_new_tokens without a stop id, {report['past_stop']} went on past a stop id -> {args.out}",
        file=sys.stderr,
    )
    return 0
