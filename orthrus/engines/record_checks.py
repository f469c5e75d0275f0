"""One record of an engine's trajectory file checked against the study, field by field, into
the values of a decoding row (orthrus/engines/ingest.py writes them).

Each check fails in one line naming the file, the line and the field (an ExternalFileError): a
missing or unknown field; a prompt id that is not a string or not one of the study's prompts;
token ids that are not integers or lie outside the tokenizer's vocabulary; more tokens than the
study's max_new_tokens; `prompt_token_ids` other than the study's rendering (another tokenizer,
chat template or message format: the file does not fit); `text` the tokens do not decode to;
finish_reason `stop` without a stop id at the end (an engine that leaves the stop token out);
finish_reason `length` with fewer tokens than max_new_tokens, or `settings` (the export's
max_new_tokens, stop_token_ids, message, temperature, echoed) other than the study's: the file was
decoded with another token budget or from prompts exported with other settings; an `env` that is
not an object, has no `engine`, or records a dtype other than the precision the file is compared
at; `logprobs` not the engine's top 2 per token in rank order.
"""

from __future__ import annotations

import math

from orthrus.decode.trajectory import Trajectory
from orthrus.engines.jsonl_records import ExternalFileError, check_fields, int_list, is_int
from orthrus.options import DecodeOptions

# the names engines and libraries give the study's precisions (compared case-insensitively)
DTYPES = {
    "bf16": ("bf16", "bfloat16", "torch.bfloat16"),
    "fp16": ("fp16", "float16", "half", "torch.float16"),
    "fp32": ("fp32", "float32", "float", "torch.float32"),
}


# engines' finish reasons -> the decoding result's (anything else is the engine's own failure)
FINISH = {"stop": "eos", "eos": "eos", "length": "length"}


# the export's generation settings a record may echo (field `settings`), each checked against the study's
SETTINGS = ("max_new_tokens", "stop_token_ids", "message", "temperature")


REEXPORT = "export them with the study's settings (snakemake results/export/prompts.jsonl) and run the engine again"


def precision_of(dtype) -> str | None:
    """The study's name of an engine's dtype (`bfloat16`, `torch.float16`, ...), None if unknown."""
    name = str(dtype).strip().lower()
    return next((p for p, names in DTYPES.items() if name in names), None)


class StudyInputs:
    """What a record is checked against: the prompt set as rendered, the tokenizer, the settings."""

    def __init__(self, prompts, tokenizer, options: DecodeOptions, stop: list[int]):
        from orthrus.chat import render_chat

        self.order = list(prompts["prompt_id"])
        self.domain = dict(zip(prompts["prompt_id"], prompts["domain"]))
        self.prompt_ids = {
            pid: render_chat(tokenizer, p, options.message) for pid, p in zip(prompts["prompt_id"], prompts["prompt"])
        }
        self.tokenizer, self.vocab, self.options, self.stop = tokenizer, len(tokenizer), options, set(stop)


def check_record(path, i: int, rec: dict, study: StudyInputs) -> dict:
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
    accepted = int_list(path, i, "accepted", rec["accepted"]) if rec.get("accepted") is not None else None
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


def _prompt_id(where: str, pid, study: StudyInputs) -> str:
    if not isinstance(pid, str):
        raise ExternalFileError(f"{where}: field 'prompt_id': must be a string, got {pid!r}")
    if pid not in study.domain:
        raise ExternalFileError(
            f"{where}: field 'prompt_id': {pid!r} is not a prompt of the study's prompt set "
            "(export them with `orthrus export-prompts`)"
        )
    return pid


def _token_ids(path, i: int, value, study: StudyInputs) -> list[int]:
    tokens = int_list(path, i, "token_ids", value, study.vocab)
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


def _prompt_tokens(path, i: int, value, ours: list[int], study: StudyInputs) -> None:
    """`prompt_token_ids`, where given, must be the study's rendering of the prompt."""
    if value is None:
        return
    given = int_list(path, i, "prompt_token_ids", value, study.vocab)
    if given != ours:
        at = next((j for j, (a, b) in enumerate(zip(given, ours)) if a != b), min(len(given), len(ours)))
        raise ExternalFileError(
            f"{path}:{i}: field 'prompt_token_ids': not the study's prompt (they part at token {at} "
            f"of {len(ours)}): another tokenizer, chat template or message format than "
            f"{study.options.message!r}; feed the exported prompt_token_ids"
        )


def _text(where: str, text, tokens: list[int], study: StudyInputs) -> None:
    if text is None:
        return
    decoded = {study.tokenizer.decode(tokens, skip_special_tokens=s) for s in (True, False)}
    if not isinstance(text, str) or text not in decoded:
        raise ExternalFileError(
            f"{where}: field 'text': the token ids do not decode to it with the study's tokenizer "
            "(a record of another tokenizer?)"
        )


def _finish(where: str, reason, tokens: list[int], study: StudyInputs) -> tuple[str, str | None]:
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
            f"{DecodeOptions.max_new_tokens}?) or hit its context limit; {REEXPORT}"
        )
    return finish, None


def _count(where: str, field: str, value, minimum: int) -> int | None:
    if value is not None and (not is_int(value) or value < minimum):
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
                or not is_int(pair[0])
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


def _check_settings(where: str, settings, study: StudyInputs) -> None:
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
                f"with other settings than the study's; {REEXPORT}"
            )
