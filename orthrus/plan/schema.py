"""The config schema's defaults, generated from the settings that hold them.

Each default below is stated once, in the package: a variant's training settings
(orthrus/distill/settings.py), the tiny teacher's (orthrus/world/teacher.py), the decoding options
(orthrus/decode/options.py: `DecodeOptions` and the controls' sizes), the verdicts' rounding
bound (orthrus/audit/verdict.py), the frontier's settings (orthrus/decode/frontier.py). The committed schema (workflow/schemas/config.schema.yaml, which
Snakemake validates with) carries them as generated values; its structure, types, ranges and
descriptions are written by hand there, and docs/CONFIG.md is generated from it.

    python -m orthrus.plan.schema            # rewrite the schema's generated defaults
    python -m orthrus.plan.schema --check    # exit 1 if they are out of date (tests/test_plan.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
KEY = re.compile(r"^(\s*)([A-Za-z0-9_$-]+):(?=\s|$)(.*)$")


def generated_defaults() -> dict[tuple[str, ...], object]:
    """{path of a schema property: its default}, from the package's settings."""
    from orthrus.audit.verdict import ROUNDING_ULPS
    from orthrus.decode import frontier, options
    from orthrus.distill.settings import DEFAULTS as TRAIN
    from orthrus.world.teacher import DEFAULTS as TINY

    out: dict[tuple[str, ...], object] = {}
    for k, v in TRAIN.items():
        out[("properties", "models", "additionalProperties", "properties", k)] = v
    for k, v in TINY.items():
        out[("properties", "teacher", "properties", "tiny", "properties", k)] = v
    decode = ("properties", "decode", "properties")
    fields = {f.name: f.default for f in dataclasses.fields(options.DecodeOptions)}
    for k in options.CONFIG_KEYS:
        out[decode + (k,)] = fields[k]
    out[decode + ("noise_batch_size",)] = options.NOISE_BATCH_SIZE
    out[decode + ("oracle_block_size",)] = options.ORACLE_BLOCK_SIZE
    out[("properties", "analysis", "properties", "rounding_ulps")] = dict(ROUNDING_ULPS)
    for k, v in frontier.DEFAULTS.items():
        out[("properties", "frontier", "properties", k)] = v
    for k, v in frontier.BASE.items():
        out[("properties", "frontier", "properties", "base", "properties", k)] = v
    return out


def _yaml_value(v) -> str:
    """A default as YAML flow text (JSON is YAML; tuples are lists)."""
    return json.dumps(list(v) if isinstance(v, tuple) else v)


def _flow_default(text: str, value: str) -> str | None:
    """`text` (a one-line flow mapping `{a: 1, default: x, ...}`) with its top-level default replaced."""
    depth, quote, i = 0, None, 0
    while i < len(text):
        c = text[i]
        if quote:
            quote = None if c == quote and text[i - 1] != "\\" else quote
        elif c in "\"'":
            quote = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif depth == 1 and text.startswith("default:", i) and text[i - 1] in "{ ,":
            start = i + len("default:")
            end, d, q = start, 0, None
            while end < len(text):  # the value ends at a top-level comma or the closing brace
                e = text[end]
                if q:
                    q = None if e == q else q
                elif e in "\"'":
                    q = e
                elif e in "{[":
                    d += 1
                elif e in "}]":
                    if d == 0:
                        break
                    d -= 1
                elif e == "," and d == 0:
                    break
                end += 1
            return text[:start] + " " + value + text[end:]
        i += 1
    return None


def render(text: str, defaults: dict[tuple[str, ...], object] | None = None) -> str:
    """The schema `text` with every generated default written in; an error names a path it lacks."""
    defaults = generated_defaults() if defaults is None else defaults
    stack: list[tuple[int, str]] = []
    lines, seen = text.split("\n"), set()
    for n, line in enumerate(lines):
        m = KEY.match(line)
        if not m or line.lstrip().startswith(("#", "-")):
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(k for _, k in stack) + (key,)
        stack.append((indent, key))
        if path in defaults and rest.strip().startswith("{"):  # `key: {type: ..., default: v, ...}`
            new = _flow_default(rest, _yaml_value(defaults[path]))
            if new is not None:
                lines[n], _ = f"{m.group(1)}{key}:{new}", seen.add(path)
        elif key == "default" and path[:-1] in defaults:  # a block property's `default: v` line
            lines[n], _ = f"{m.group(1)}default: {_yaml_value(defaults[path[:-1]])}", seen.add(path[:-1])
    missing = sorted(".".join(p) for p in set(defaults) - seen)
    if missing:
        raise KeyError(f"the schema has no default to generate at: {', '.join(missing)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orthrus.plan.schema", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed schema's defaults are out of date")
    args = ap.parse_args(argv)
    text = SCHEMA.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            sys.stderr.write(f"{SCHEMA}: generated defaults out of date; run python -m orthrus.plan.schema\n")
            return 1
        return 0
    SCHEMA.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
