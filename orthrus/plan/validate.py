"""The config checked against its schema, before any job: defaults filled in, integers typed,
names YAML read as numbers and NaNs refused, then the schema's own rules, then the cross-key rules
(orthrus/plan/checks.py); each problem one line naming its key (`key.path: what is wrong`)."""

from __future__ import annotations

import copy
import re

from orthrus.plan.checks import cross_key_problems


def coerce_integers(instance, schema: dict):
    """`instance` with every integer-valued float at an integer-typed key made an int (YAML's `2.0`,
    which the schema accepts as an integer but a rule or an argparse `type=int` would not)."""
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "integer" in types and isinstance(instance, float) and instance.is_integer():
        return int(instance)
    if isinstance(instance, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        for key, value in instance.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                instance[key] = coerce_integers(value, sub)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        instance[:] = [coerce_integers(v, schema["items"]) for v in instance]
    return instance


def fill_defaults(instance, schema: dict) -> None:
    """Set every missing key that has a schema default (recursively through `properties`)."""
    if not isinstance(instance, dict) or schema.get("x-fill-defaults") is False:
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if key in instance:
            fill_defaults(instance[key], sub)


def _key(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _message(error) -> str:
    """One line naming the offending key: unknown keys and missing ones get their own path."""
    where = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        hint = f" (known: {', '.join(sorted(known))})" if known else ""
        return "; ".join(f"{_key(where + [k])}: unknown key{hint}" for k in extra)
    if error.validator == "required":
        missing = re.match(r"'([^']+)'", error.message)
        return f"{_key(where + [missing.group(1) if missing else '?'])}: required key missing"
    if error.validator == "propertyNames":
        return f"{_key(where)}: bad name {error.instance!r}: {error.message}"
    return f"{_key(where)}: {error.message}"


def schema_problems(config: dict, schema: dict) -> list[str]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    return [_message(e) for e in errors]


def name_key_problems(config: dict) -> list[str]:
    """Names of models, external models and files, and grids become paths and wildcards: strings only (YAML
    reads `1:` or `~:` as a number or null, which the schema's name pattern does not see)."""
    sections = {
        "models": config.get("models"),
        "external_models": config.get("external_models"),
        "decode.grids": (config.get("decode") or {}).get("grids"),
        "decode.external": (config.get("decode") or {}).get("external"),
    }
    return [
        f"{where}: the name {key!r} is a {type(key).__name__}, not a string (quote it in the YAML)"
        for where, section in sections.items()
        if isinstance(section, dict)
        for key in section
        if not isinstance(key, str)
    ]


def nonfinite_problems(node, path="") -> list[str]:
    """Every NaN or infinity in the config, named by its key: the schema's `minimum`/`maximum`
    compare false with NaN, so a range check alone lets `.nan` through."""
    import math

    if isinstance(node, float) and not math.isfinite(node):
        return [f"{path or '(top level)'}: {node!r} is not a finite number"]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in nonfinite_problems(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in nonfinite_problems(v, f"{path}[{i}]")]
    return []


def check(config: dict, schema: dict, scatter: dict | None = None) -> list[str]:
    """Fill defaults into `config` (in place) and return every problem, one line each;
    `scatter`: Snakemake's `--set-scatter` {name: count}, checked with the config."""
    fill_defaults(config, schema)
    coerce_integers(config, schema)
    problems = name_key_problems(config) + nonfinite_problems(config)
    problems += schema_problems(config, schema)
    if not problems:  # cross-key rules assume the types are right
        problems += cross_key_problems(config, schema, scatter)
    return problems
