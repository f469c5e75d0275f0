"""An engine's JSON Lines file read record by record: each line a JSON object, its fields and
integer lists checked, every failure one line naming the file, the line and the field. Shared
by the greedy trajectory file (orthrus/engines/ingest.py) and the sampled one
(orthrus/engines/engine_samples.py)."""

from __future__ import annotations

import json

from orthrus.engines.formats import EXTERNAL_FIELDS, EXTERNAL_REQUIRED
from orthrus.errors import InputError


class ExternalFileError(InputError):
    """A trajectory file that cannot join the study; the message names the file, line and field."""


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def file_lines(path):
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


def json_object(path, i: int, text: str) -> dict:
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


def int_list(path, i, field, value, vocab: int | None = None, minimum: int = 0) -> list[int]:
    where = f"{path}:{i}: field {field!r}"
    if not isinstance(value, list):
        raise ExternalFileError(f"{where}: must be a list of integers, got {type(value).__name__}")
    for j, t in enumerate(value):
        if not is_int(t):
            raise ExternalFileError(f"{where}: item {j} is {t!r}, not an integer")
        if t < minimum or (vocab is not None and t >= vocab):
            bound = f"the tokenizer's vocabulary 0..{vocab - 1}" if vocab is not None else f">= {minimum}"
            raise ExternalFileError(f"{where}: item {j} is {t}, outside {bound} (a record of another tokenizer?)")
    return list(value)


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
