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

Each check fails in one line naming the file, the line and the field (an InputError): a line that
is not a JSON object; a missing or unknown field; a prompt id that is not a string, not one of the
study's prompts, or given twice; token ids that are not integers or lie outside the tokenizer's
vocabulary; more tokens than the study's max_new_tokens; `prompt_token_ids` other than the study's
rendering (another tokenizer, chat template or message format: the file does not fit); `text` the
tokens do not decode to; finish_reason `stop` without a stop id at the end (an engine that leaves
the stop token out); finish_reason `length` with fewer tokens than max_new_tokens, `settings` (the
export's max_new_tokens, stop_token_ids, message, temperature, echoed) other than the study's, and
records ending early without a stop id in bulk (EARLY_MIN and more than EARLY_SHARE of the records):
the file was decoded with another token budget or from prompts exported with other settings; an
`env` that is not an object, has no `engine`, or records a dtype other than the precision the file
is compared at. A line cut short is reported at the column where it was cut. What is not an error
is kept and counted: a prompt of the set without a record becomes an error row (`Missing: ...`, in
every table's n_errors_excluded), an engine's own failure (finish_reason other than stop, eos or
length) too; a few trajectories that end before the budget without a stop id (and without a
finish_reason), or go on past one, are kept as the engine emitted them (they diverge where they
part from the reference) and counted in the job's report.

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
import math
import sys
from pathlib import Path

from orthrus.contracts import ATTENTIONS, DECODE_COLUMNS, EXTERNAL_DECODER
from orthrus.decode.trajectory import Trajectory, decoding_row
from orthrus.engines.formats import EXTERNAL_FIELDS, EXTERNAL_REQUIRED
from orthrus.errors import InputError
from orthrus.options import DecodeOptions

# the names engines and libraries give the study's precisions (compared case-insensitively)
DTYPES = {
    "bf16": ("bf16", "bfloat16", "torch.bfloat16"),
    "fp16": ("fp16", "float16", "half", "torch.float16"),
    "fp32": ("fp32", "float32", "float", "torch.float32"),
}
# engines' finish reasons -> the decoding result's (anything else is the engine's own failure)
FINISH = {"stop": "eos", "eos": "eos", "length": "length"}
# Records ending before max_new_tokens without a stop id (and without a finish_reason to say why): a
# few are the engine's own (a stop string, its context limit) and are kept; this many in bulk say the
# file was decoded with another token budget, and fail the ingest.
EARLY_MIN, EARLY_SHARE = 2, 0.05
# the export's generation settings a record may echo (field `settings`), each checked against the study's
SETTINGS = ("max_new_tokens", "stop_token_ids", "message", "temperature")
_REEXPORT = "export them with the study's settings (snakemake results/export/prompts.jsonl) and run the engine again"


class ExternalFileError(InputError):
    """A trajectory file that cannot join the study; the message names the file, line and field."""


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def precision_of(dtype) -> str | None:
    """The study's name of an engine's dtype (`bfloat16`, `torch.float16`, ...), None if unknown."""
    name = str(dtype).strip().lower()
    return next((p for p, names in DTYPES.items() if name in names), None)


def _lines(path):
    """(line number, decoded text) of every non-blank line of `path`."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ExternalFileError(f"{path}: trajectory file not found") from None
    with f:
        for i, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ExternalFileError(f"{path}:{i}: not valid UTF-8 ({e})") from None
            if text.strip():
                yield i, text


def _object(path, i: int, text: str) -> dict:
    line = text.rstrip("\r\n")
    try:  # without the line's own newline: a record cut short is reported where it was cut
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        msg = e.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise ExternalFileError(
            f"{path}:{i}: not a JSON object ({msg} at column {e.colno} of a {len(line)}-character "
            "line; a record cut short?)"
        ) from None
    if not isinstance(rec, dict):
        raise ExternalFileError(f"{path}:{i}: not a JSON object (a {type(rec).__name__})")
    return rec


def first_env(path) -> dict | None:
    """The `env` object of the first record of `path`; None where the file does not exist yet."""
    if not Path(path).is_file():
        return None
    for i, text in _lines(path):
        env = _object(path, i, text).get("env")
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


class _Study:
    """What a record is checked against: the prompt set as rendered, the tokenizer, the settings."""

    def __init__(self, prompts, tokenizer, options: DecodeOptions, stop: list[int]):
        from orthrus.chat import render_chat

        self.order = list(prompts["prompt_id"])
        self.domain = dict(zip(prompts["prompt_id"], prompts["domain"]))
        self.prompt_ids = {
            pid: render_chat(tokenizer, p, options.message) for pid, p in zip(prompts["prompt_id"], prompts["prompt"])
        }
        self.tokenizer, self.vocab, self.options, self.stop = tokenizer, len(tokenizer), options, set(stop)


def _ints(path, i, field, value, vocab: int | None = None, minimum: int = 0) -> list[int]:
    where = f"{path}:{i}: field {field!r}"
    if not isinstance(value, list):
        raise ExternalFileError(f"{where}: must be a list of integers, got {type(value).__name__}")
    for j, t in enumerate(value):
        if not _is_int(t):
            raise ExternalFileError(f"{where}: item {j} is {t!r}, not an integer")
        if t < minimum or (vocab is not None and t >= vocab):
            bound = f"the tokenizer's vocabulary 0..{vocab - 1}" if vocab is not None else f">= {minimum}"
            raise ExternalFileError(f"{where}: item {j} is {t}, outside {bound} (a record of another tokenizer?)")
    return list(value)


def check_record(path, i: int, rec: dict, study: _Study) -> dict:
    """One record as the decoding row's values (see the module docstring for the checks): one
    validator per field, each failing in one line that names the file, the line and the field."""
    where = f"{path}:{i}"
    check_fields(where, rec)
    pid = _prompt_id(where, rec["prompt_id"], study)
    tokens = _token_ids(path, i, rec["token_ids"], study)
    env = _env(where, rec["env"], study.options)
    _prompt_tokens(path, i, rec.get("prompt_token_ids"), study.prompt_ids[pid], study)
    _text(where, rec.get("text"), tokens, study)
    _check_settings(where, rec.get("settings"), study)
    finish, error = _finish(where, rec.get("finish_reason"), tokens, study)
    forwards = _count(where, "forwards", rec.get("forwards"), 1)
    draft_forwards = _count(where, "draft_forwards", rec.get("draft_forwards"), 0)
    accepted = _ints(path, i, "accepted", rec["accepted"]) if rec.get("accepted") is not None else None
    seconds = _seconds(where, rec.get("seconds"))
    logprobs = _logprobs(where, rec.get("logprobs"), tokens, study.vocab)
    n_prefill, n_verify = _model_forwards(forwards, accepted)
    return {
        "prompt_id": pid,
        "line": i,
        "trajectory": Trajectory(
            tokens=tokens,
            accepted=accepted or [],
            n_prefill=n_prefill,
            n_diffusion=draft_forwards or 0,
            n_verify=n_verify,
            seconds=float(seconds) if seconds is not None else math.nan,
            finish_reason=finish,
            error=error,
        ),
        "engine_env": env,
        "extra": rec.get("extra"),
        "logprobs": logprobs,
        "past_stop": any(t in study.stop for t in tokens[:-1]),
        "early": finish == "length" and len(tokens) < study.options.max_new_tokens,
    }


def check_fields(where: str, rec: dict, required=EXTERNAL_REQUIRED, known=EXTERNAL_FIELDS) -> None:
    """A record's fields: every `required` one there, none outside `known` (a sampled file has its own)."""
    missing = [f for f in required if f not in rec]
    if missing:
        raise ExternalFileError(
            f"{where}: field {missing[0]!r}: required field missing (required: {', '.join(required)})"
        )
    unknown = [f for f in rec if f not in known]
    if unknown:
        raise ExternalFileError(
            f"{where}: field {unknown[0]!r}: unknown field (known: {', '.join(known)}; put anything else under 'extra')"
        )


def _prompt_id(where: str, pid, study: _Study) -> str:
    if not isinstance(pid, str):
        raise ExternalFileError(f"{where}: field 'prompt_id': must be a string, got {pid!r}")
    if pid not in study.domain:
        raise ExternalFileError(
            f"{where}: field 'prompt_id': {pid!r} is not a prompt of the study's prompt set "
            "(export them with `orthrus export-prompts`)"
        )
    return pid


def _token_ids(path, i: int, value, study: _Study) -> list[int]:
    tokens = _ints(path, i, "token_ids", value, study.vocab)
    budget = study.options.max_new_tokens
    if len(tokens) > budget:
        raise ExternalFileError(
            f"{path}:{i}: field 'token_ids': {len(tokens)} tokens, more than the study's "
            f"max_new_tokens {budget} (the engine ran another experiment)"
        )
    return tokens


def _env(where: str, env, options: DecodeOptions) -> dict:
    if not isinstance(env, dict):
        raise ExternalFileError(
            f"{where}: field 'env': must be an object (engine, version, dtype, kernel, batch_size, device)"
        )
    if not isinstance(env.get("engine"), str) or not env["engine"].strip():
        raise ExternalFileError(f"{where}: field 'env.engine': required, the engine's name (e.g. vllm, sglang)")
    if env.get("dtype") is not None and precision_of(env["dtype"]) != options.precision:
        raise ExternalFileError(
            f"{where}: field 'env.dtype': {env['dtype']!r} is not {options.precision}, the precision "
            "the file is compared at (decode.external's precision, or the first record's dtype)"
        )
    return env


def _prompt_tokens(path, i: int, value, ours: list[int], study: _Study) -> None:
    """`prompt_token_ids`, where given, must be the study's rendering of the prompt."""
    if value is None:
        return
    given = _ints(path, i, "prompt_token_ids", value, study.vocab)
    if given != ours:
        at = next((j for j, (a, b) in enumerate(zip(given, ours)) if a != b), min(len(given), len(ours)))
        raise ExternalFileError(
            f"{path}:{i}: field 'prompt_token_ids': not the study's prompt (they part at token {at} "
            f"of {len(ours)}): another tokenizer, chat template or message format than "
            f"{study.options.message!r}; feed the exported prompt_token_ids"
        )


def _text(where: str, text, tokens: list[int], study: _Study) -> None:
    if text is None:
        return
    decoded = {study.tokenizer.decode(tokens, skip_special_tokens=s) for s in (True, False)}
    if not isinstance(text, str) or text not in decoded:
        raise ExternalFileError(
            f"{where}: field 'text': the token ids do not decode to it with the study's tokenizer "
            "(a record of another tokenizer?)"
        )


def _finish(where: str, reason, tokens: list[int], study: _Study) -> tuple[str, str | None]:
    """(the decoding row's finish_reason, its error) from the record's `finish_reason`."""
    ends_at_stop = bool(tokens) and tokens[-1] in study.stop
    if reason is None:
        return ("eos" if ends_at_stop else "length"), None
    if not isinstance(reason, str):
        raise ExternalFileError(f"{where}: field 'finish_reason': must be a string (stop, eos, length), got {reason!r}")
    finish = FINISH.get(reason.lower())
    if finish is None:
        return "error", f"EngineFinish: the engine ended this prompt with finish_reason {reason!r}"
    if finish == "eos" and not ends_at_stop:
        raise ExternalFileError(
            f"{where}: field 'finish_reason': {reason!r}, but token_ids does not end with a stop "
            f"id {sorted(study.stop)}: write the stop token back (docs/EXTERNAL.md)"
        )
    budget = study.options.max_new_tokens
    if finish == "length" and len(tokens) < budget:
        raise ExternalFileError(
            f"{where}: field 'finish_reason': {reason!r} after {len(tokens)} tokens, fewer than "
            f"the study's max_new_tokens {budget}: the engine ran with another token budget "
            "(prompts exported with another --max-new-tokens, whose default is "
            f"{DecodeOptions.max_new_tokens}?) or hit its context limit; {_REEXPORT}"
        )
    return finish, None


def _count(where: str, field: str, value, minimum: int) -> int | None:
    if value is not None and (not _is_int(value) or value < minimum):
        raise ExternalFileError(f"{where}: field {field!r}: must be an integer >= {minimum}, got {value!r}")
    return value


def _seconds(where: str, seconds) -> float | None:
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf
    ):
        raise ExternalFileError(f"{where}: field 'seconds': must be a finite number >= 0, got {seconds!r}")
    return seconds


def _logprobs(where: str, value, tokens: list[int], vocab: int) -> list | None:
    """`logprobs`: the engine's own top log-probabilities at every generated position, [[id, logprob],
    ...] (at least 2 pairs, in rank order, logprobs finite and not increasing): what a verdict needs
    to ask whether the engine emitted its own argmax and by what margin (orthrus.audit.verdict). An
    empty list is a position the engine reported nothing for (llama.cpp's server at the tokens its
    speculation emits): a divergence there gets the reference's verdict alone."""
    if value is None:
        return None
    field = f"{where}: field 'logprobs'"
    if not isinstance(value, list) or len(value) != len(tokens):
        n = len(value) if isinstance(value, list) else type(value).__name__
        raise ExternalFileError(f"{field}: must be a list with one entry per token_ids item ({len(tokens)}), got {n}")
    for t, top in enumerate(value):
        if top == []:
            continue
        if not isinstance(top, list) or len(top) < 2:
            raise ExternalFileError(
                f"{field}: position {t}: must be a list of at least 2 [token_id, logprob] pairs (the engine's top 2), or empty (none reported)"
            )
        for pair in top:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not _is_int(pair[0])
                or not 0 <= pair[0] < vocab
                or isinstance(pair[1], bool)
                or not isinstance(pair[1], (int, float))
                or not math.isfinite(pair[1])
            ):
                raise ExternalFileError(
                    f"{field}: position {t}: {pair!r} is not a [token_id, logprob] pair with an id "
                    f"of the vocabulary 0..{vocab - 1} and a finite log-probability"
                )
        if any(a[1] < b[1] for a, b in zip(top, top[1:])):
            raise ExternalFileError(f"{field}: position {t}: not in rank order (log-probabilities must not increase)")
    return [[[int(a), float(b)] for a, b in top[:2]] for top in value]


def _model_forwards(forwards: int | None, accepted: list[int] | None) -> tuple[int, int]:
    """(prefill forwards, verify forwards): as given (the prefill one of them), else one verify per
    accepted step after the prefill; neither given: none recorded (tokens per forward undefined, NaN)."""
    if forwards is not None:
        return 1, forwards - 1
    if accepted is not None:
        return 1, len(accepted)
    return 0, 0


def _check_settings(where: str, settings, study: _Study) -> None:
    """The export's generation settings a record echoes (`settings`: max_new_tokens, stop_token_ids,
    message, temperature), each the study's: a file made from prompts exported with other settings
    is another experiment."""
    if settings is None:
        return
    if not isinstance(settings, dict):
        raise ExternalFileError(f"{where}: field 'settings': must be an object (the export's {', '.join(SETTINGS)})")
    o = study.options
    for key, value in settings.items():
        field = f"field 'settings.{key}'"
        if key not in SETTINGS:
            raise ExternalFileError(f"{where}: {field}: unknown setting (known: {', '.join(SETTINGS)})")
        ours = {
            "max_new_tokens": o.max_new_tokens,
            "stop_token_ids": sorted(study.stop),
            "message": o.message,
            "temperature": 0,
        }[key]
        given = sorted(value) if key == "stop_token_ids" and isinstance(value, list) else value
        if given != ours or isinstance(given, bool):
            raise ExternalFileError(
                f"{where}: {field}: {value!r}, not the study's {ours!r}: the prompts were exported "
                f"with other settings than the study's; {_REEXPORT}"
            )


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
            f"--max-new-tokens, whose default is {DecodeOptions.max_new_tokens}?); {_REEXPORT}"
        )


def read_records(path, study: _Study) -> dict[str, dict]:
    """prompt id -> checked record of every line of `path`; a prompt id given twice fails naming both lines."""
    records = {}
    for i, text in _lines(path):
        r = check_record(path, i, _object(path, i, text), study)
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
    study = _Study(prompts, tokenizer, options, stop)
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
