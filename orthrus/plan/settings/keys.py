"""The vocabulary the config's typed settings are written in: `key` (one setting: its type, default,
description and JSON Schema rules), `section` (a closed object of settings), `ref` (a shared block
of `$defs`), and the value sets that many keys share.

A key's type is written as the Python type of its values: `int` is a JSON integer, `float` a JSON
number (integers accepted), `str`, `bool`, `list` (array), `dict` (object), `None` (null); a tuple
of them is a union, e.g. `(int, None)`. Rules keep their JSON Schema names (`minimum`,
`exclusiveMinimum`, `uniqueItems`, ...), so the JSON Schema reference explains each one.
"""

from __future__ import annotations

from orthrus.contracts import ATTENTIONS, PRECISIONS
from orthrus.engines.vllm_patches import PATCHES as _VLLM_PATCHES

_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object", None: "null"}
_UNSET = object()

# a name that becomes a path segment or a table label: no leading `.` or `-`, no `/`, no newline
# (`(?![\s\S])` rather than `$`, which would also match before a final newline)
NAME = "^[A-Za-z0-9_][A-Za-z0-9_.-]*(?![\\s\\S])"
NAMES = {"pattern": NAME}
# a prompt's chat message format (orthrus/options.py check_message)
MESSAGE = "^(none|empty|system:.*)$"
PRECISION = {"type": "string", "enum": list(PRECISIONS)}
ATTENTION = {"type": "string", "enum": list(ATTENTIONS)}


def _type(t):
    return [_TYPES[x] for x in t] if isinstance(t, tuple) else _TYPES[t]


def plain(value):
    """`value` as YAML data: tuples as lists, every container a fresh copy (so that the YAML
    writer, seeing no object twice, writes no anchors)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def key(type_, default=_UNSET, description: str | None = None, **rules) -> dict:
    """One setting: `key(int, 4000, "Memory per job in MB.", minimum=1)`. A default left out is
    none (the key stays unset unless given)."""
    out = {"type": _type(type_), **rules}
    if default is not _UNSET:
        out["default"] = default
    if description is not None:
        out["description"] = description
    return out


def array(items: dict, default=_UNSET, description: str | None = None, *, nullable=False, **rules) -> dict:
    """A list setting whose elements follow `items` (a `key` or a value set like PRECISION)."""
    return key((list, None) if nullable else list, default, description, items=items, **rules)


def choices(values, default=_UNSET, description: str | None = None, **rules) -> dict:
    """A string setting that takes one of `values`."""
    return key(str, default, description, enum=list(values), **rules)


def section(
    description: str | None, properties: dict, *, closed=True, nullable=False, fill_defaults=True, **rules
) -> dict:
    """An object of settings. `closed`: an unknown key is an error; `nullable`: null is accepted
    too. `fill_defaults=False`: the validator leaves its defaults out of the config
    (`x-fill-defaults`, orthrus/plan/validate.py), for sections whose program fills them in itself,
    from the same settings."""
    out: dict = {"type": ["object", "null"] if nullable else "object"}
    if closed:
        out["additionalProperties"] = False
    if not fill_defaults:
        out["x-fill-defaults"] = False
    required = rules.pop("required", None)
    out.update(rules)
    if description is not None:
        out["description"] = description
    out["properties"] = properties
    if required is not None:  # after the keys it names
        out["required"] = required
    return out


def ref(name: str) -> dict:
    """The shared block `name` of the schema's `$defs`."""
    return {"$ref": f"#/$defs/{name}"}


def with_defaults(defaults: dict, properties: dict) -> dict:
    """`properties` (keys without defaults) with each default taken from `defaults`, a settings
    object's table; the two must name the same keys, so that no setting is left out of the config."""
    extra, missing = sorted(set(properties) - set(defaults)), sorted(set(defaults) - set(properties))
    if extra or missing:
        raise KeyError(f"settings and config keys differ: only in the config {extra}, only in the settings {missing}")
    return {k: _before_description(spec, default=defaults[k]) for k, spec in properties.items()}


def _before_description(spec: dict, **rules) -> dict:
    # a key's default and rules read before its description, as `key` writes them
    out = {k: v for k, v in spec.items() if k != "description"}
    out.update(rules)
    if "description" in spec:
        out["description"] = spec["description"]
    return out


# decode.engines / sampling.engines: vLLM functions the recipe corrects for a fix-controlled run
VLLM_PATCH_LIST = array(
    choices(_VLLM_PATCHES),
    [],
    (
        "vLLM functions corrected for this run only (orthrus/engines/vllm_patches.py; none by default), named "
        "in every record's env: cpu-expand-float corrects the CPU fallback of the rejection sampler's expand "
        "kernel (docs/findings/vllm-cpu-expand-batch-to-tokens.md)."
    ),
    uniqueItems=True,
)
