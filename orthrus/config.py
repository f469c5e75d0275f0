"""Configuration as data and as typed settings.

A command reads its settings as plain data (`load_config`: a YAML/JSON file or inline JSON, as the
Snakemake rules pass them; `apply_sets`: `--set key=value`). The study's config is one pydantic model
(orthrus/plan/config/), written in the vocabulary below, which the distillation settings
(orthrus/distill/settings.py) share: `Section` (a closed set of keys whose defaults are stated once,
on its fields), the value types `Int` (an integer; YAML's `2.0` is 2), `Num` (a finite number that
keeps an integer an integer, so that a value reaches a command as it was written), `Name`, the
`unique` list, and `problems`, which turns pydantic's errors into one line per wrong key, its path
first (`decode.precisions[0]: ...`), as every config error of the project reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WrapValidator,
    model_serializer,
)


def parse_value(v: str):
    """A `--set key=value` value: JSON when it parses (numbers, lists, null), else the string."""
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def load_config(path: str | None, section: str | None = None) -> dict:
    """Load a YAML/JSON file, or inline JSON (as Snakemake rules pass their settings);
    return `cfg[section]` when that key exists, else the whole."""
    if not path:
        return {}
    inline = str(path).lstrip().startswith("{")
    text = path if inline else Path(path).read_text()
    if inline or str(path).endswith(".json"):
        cfg = json.loads(text)
    else:
        import yaml

        cfg = yaml.safe_load(text) or {}
    if section and isinstance(cfg, dict) and isinstance(cfg.get(section), dict):
        cfg = cfg[section]
    return dict(cfg)


def apply_sets(cfg: dict, items) -> dict:
    """`cfg` with each `key=value` of `items` (the `--set` options) applied, values parsed by `parse_value`."""
    for kv in items:
        k, _, v = kv.partition("=")
        cfg[k.strip()] = parse_value(v)
    return cfg


# ----------------------------------------------------------------------------- typed settings

OMIT = "omit"  # Annotated marker: a key left out of the checked config's data until given (its default, where
# it has one, is the typed section's)
SAYS: dict[str, str] = {}  # each pattern's rule in words, which its error line gives instead of the regex


def matching(regex: str, says: str):
    """A string matching `regex`; a value that does not is refused as "not `says`"."""
    SAYS[regex] = says
    return Annotated[str, StringConstraints(pattern=regex)]


# a name that becomes a path segment or a table label: no leading `.` or `-`, no `/`, no newline
# (`(?![\s\S])` rather than `$`, which would also match before a final newline)
Name = matching(
    "^[A-Za-z0-9_][A-Za-z0-9_.-]*(?![\\s\\S])", "a name of letters, digits, _ . and - that starts with neither . nor -"
)
# a prompt's chat message format (orthrus/options.py check_message)
Message = matching("^(none|empty|system:.*)$", "empty, none or system:<text>")
Sha256 = matching("^[0-9a-f]{64}$", "a SHA-256 (64 lowercase hex digits)")


def _integral(v):
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _keep_int(v, handler):
    out = handler(v)
    return v if type(v) is int else out


Int = Annotated[int, BeforeValidator(_integral)]
Num = Annotated[float, WrapValidator(_keep_int)]


def _distinct(v: list) -> list:
    if len({json.dumps(x, sort_keys=True) for x in v}) != len(v):
        raise ValueError(f"{v!r} has non-unique elements")
    return v


def unique(item, **rules):
    """A list of `item` without repeats (JSON Schema's uniqueItems), with `rules` (min_length, ...)."""
    return Annotated[list[item], Field(json_schema_extra={"uniqueItems": True}, **rules), AfterValidator(_distinct)]


def opt(t, **rules):
    """`t` with `rules`, or null (the rules stay on `t` in the JSON schema)."""
    return Annotated[t, Field(**rules)] | None if rules else t | None


class Problems(ValueError):
    """Cross-key problems of a section, each (key relative to the section, message); `problems`
    names each with the section's path."""

    def __init__(self, lines: list[tuple[str, str]]):
        self.lines = lines
        super().__init__("; ".join(f"{k}: {m}" for k, m in lines))


def check(lines: list[tuple[str, str] | None]) -> None:
    """Raise Problems for the lines that are not None and have a message (a validator's rules)."""
    found = [line for line in lines if line and line[1]]
    if found:
        raise Problems(found)


class Section(BaseModel):
    """A closed section of settings: an unknown key is an error, each default is stated once (on its
    field), values are taken as written (no string becomes a number here; `--config` values are
    read as YAML where the model wants no string: orthrus/plan/study_config.py). A key that may be left
    out but not given null is typed without None and defaults to None (a default is not validated),
    so its attribute reads None when it was left out. Dumped, a section
    holds every key with a default and the keys given; `SPARSE` ones hold only the keys given, for
    settings whose program applies the same defaults (a variant's training settings), so that a
    default added there reruns nothing."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, regex_engine="python-re")
    SPARSE: ClassVar[bool] = False

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        if self is None:  # a section left out (its field defaults to None, see above)
            return None
        data, given, fields = handler(self), self.model_fields_set, type(self).model_fields
        return {k: v for k, v in data.items() if k in given or not (self.SPARSE or OMIT in fields[k].metadata)}


def read_section(model: type[BaseModel], data, what: str):
    """`data` (a section given as data, or as JSON text on a command line) validated by `model`, every key
    left out at its default; raises InputError `bad <what>: ...` naming every wrong key."""
    from orthrus.errors import InputError

    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise InputError(f"bad {what}: not JSON ({e})") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise InputError(f"bad {what}: " + "; ".join(problems(e, data, model))) from None


def members(t) -> list:
    """The types a field annotation admits: Annotated and unions unwrapped."""
    if get_origin(t) is Annotated:
        return members(get_args(t)[0])
    if get_origin(t) in (Union, type(int | None)):
        return [m for a in get_args(t) for m in members(a)]
    return [t]


def step(t, key):
    """The annotation one key (a field, a mapping's name, a list index) below `t`, or None."""
    for m in members(t):
        if isinstance(m, type) and issubclass(m, BaseModel) and key in m.model_fields:
            return m.model_fields[key].annotation
        if get_origin(m) is dict and isinstance(key, str):
            return get_args(m)[1]
        if get_origin(m) is list and isinstance(key, int):
            return get_args(m)[0]
    return None


def mapping_fields(model: type[BaseModel], path: tuple = ()) -> frozenset[tuple]:
    """The paths of `model`'s fields that are mappings of entries a config names (`dict[str, ...]`), at
    any depth below it: the tables an overlay replaces whole (orthrus/plan/overlay.py)."""
    found = set()
    for name, f in model.model_fields.items():
        for m in members(f.annotation):
            if get_origin(m) is dict:
                found.add((*path, name))
            elif isinstance(m, type) and issubclass(m, BaseModel) and m is not model:
                found |= mapping_fields(m, (*path, name))
    return frozenset(found)


TYPES = {
    "int_type": "integer",
    "float_type": "number",
    "string_type": "string",
    "bool_type": "boolean",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "none_required": "null",
}


def _where(path: list) -> str:
    out = ""  # a dotted path, list indices in brackets; a key of several (`a.b` in a name) as given
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _path(loc: tuple, data, model, missing=False) -> tuple[list, Any]:
    """The keys of `loc` that name data (a union member's tag names none), and the model type there;
    `missing`: the last key is one the data lacks."""
    path, node, t = [], data, model
    for i, key in enumerate(loc):
        if isinstance(node, dict) and key in node or isinstance(node, list) and isinstance(key, int):
            node = node[key] if isinstance(node, dict) or key < len(node) else None
        elif not (missing and i == len(loc) - 1):
            continue
        path.append(key)
        t = step(t, key) if t is not None else None
    return path, t


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def problems(error: ValidationError, data, model) -> list[str]:
    """One line per wrong key of `data`, validated by `model`: `path: what is wrong`."""
    lines: dict[str, list] = {}
    for e in error.errors():
        loc = tuple(e["loc"])
        if loc[-1:] == ("[key]",):
            path, _ = _path(loc[:-2], data, model)
            lines.setdefault(_where(path), []).append(f"bad name {_short(loc[-2])}: {_said(e)}")
            continue
        path, t = _path(loc, data, model, missing=e["type"] == "missing")
        where, kind, given = _where(path), e["type"], e.get("input")
        error_ = (e.get("ctx") or {}).get("error")
        if isinstance(error_, Problems):
            for key, message in error_.lines:
                if not key and not path:  # a whole-study rule's line names its own key
                    key, _, message = message.partition(": ")
                lines.setdefault(_where([*path, key] if key else path), []).append(message)
        elif kind == "missing":
            lines.setdefault(where, []).append("required key missing")
        elif kind == "extra_forbidden":
            parent = _path(loc[:-1], data, model)[1]  # the section the key is unknown to
            known = sorted({k for m in members(parent) if isinstance(m, type) for k in getattr(m, "model_fields", {})})
            lines.setdefault(where, []).append("unknown key" + (f" (known: {', '.join(known)})" if known else ""))
        elif kind in TYPES:
            lines.setdefault(where, []).append(("type", TYPES[kind], given))
        elif kind == "value_error":
            lines.setdefault(where, []).append(str(error_ or e["msg"]))
        elif kind == "string_pattern_mismatch" and e["ctx"]["pattern"] in SAYS:
            lines.setdefault(where, []).append(f"{_short(given)} is {_said(e)}")
        else:
            lines.setdefault(where, []).append(f"{e['msg']}, got {_short(given)}")
    return [f"{where}: {_message(found)}" for where, found in sorted(lines.items())]


def _said(e: dict) -> str:
    pattern = (e.get("ctx") or {}).get("pattern")
    return f"not {SAYS[pattern]}" if e["type"] == "string_pattern_mismatch" and pattern in SAYS else e["msg"]


def _message(found: list) -> str:
    said = list(dict.fromkeys(m for m in found if isinstance(m, str)))
    if said:
        return "; ".join(said)
    types = list(dict.fromkeys(t for _, t, _ in found))
    return f"{_short(found[0][2])} is not of type {', '.join(repr(t) for t in types)}"
