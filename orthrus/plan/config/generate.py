"""workflow/schemas/config.schema.yaml and docs/CONFIG.md, generated from the config model.

The JSON schema is `StudyConfig.model_json_schema()` (for editors and the Snakemake catalog's
convention; nothing in the package reads it), the reference page a table of every key, its type,
default and description, from the same schema.

    python -m orthrus.plan.config.generate            # rewrite both
    python -m orthrus.plan.config.generate --check    # exit 1 if either is out of date (the tests run it)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from orthrus.plan.config import StudyConfig

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DOC = ROOT / "docs" / "CONFIG.md"
HEADER = (
    "# Generated from the config model (orthrus/plan/config/) by `python -m orthrus.plan.config.generate`;\n"
    "# do not edit by hand (tests/test_plan.py fails when this file differs from what the model gives).\n"
)
# pydantic writes the bounds of a type it wraps in a validator under their own names
BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def _clean(node):
    if isinstance(node, list):
        return [_clean(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {BOUNDS.get(k, k): v if k == "default" else _clean(v) for k, v in node.items() if k != "title"}
    if out.get("default", 0) is None and "null" not in json.dumps({k: v for k, v in node.items() if k != "default"}):
        del out["default"]  # a key that may be left out, not given null: it has no default
    return out


def schema() -> dict:
    """The model's JSON schema (draft 2020-12), without pydantic's titles."""
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema"} | _clean(StudyConfig.model_json_schema())
    return out


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def _mapping(dumper, data: dict):
    # a key that fits a line on one, the way a reader scans a section; a longer one as a block
    flat = all(not isinstance(v, (dict, list)) or _scalars(v) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flat and len(json.dumps(data)) <= 100)


def _scalars(v) -> bool:
    return isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v)


_Dumper.add_representer(dict, _mapping)
_Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=_scalars(v)))
_Dumper.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style=">" if len(v) > 80 else None)
)


def schema_text() -> str:
    return HEADER + yaml.dump(schema(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


# ----------------------------------------------------------------------------- docs/CONFIG.md


def _resolve(s: dict, defs: dict) -> dict:
    """A `$ref` replaced by its definition, `X or null` by X with `nullable`."""
    if "$ref" in s:
        return _resolve(defs[s["$ref"].rsplit("/", 1)[-1]] | {k: v for k, v in s.items() if k != "$ref"}, defs)
    kinds = s.get("anyOf", [])
    real = [k for k in kinds if k.get("type") != "null"]
    if len(real) == 1:
        return _resolve(real[0], defs) | {k: v for k, v in s.items() if k != "anyOf"} | {"nullable": len(kinds) > 1}
    return s


def _type(s: dict, defs: dict) -> str:
    if "anyOf" in s:
        text = " or ".join(_type(_resolve(k, defs), defs) for k in s["anyOf"])
    elif s.get("type") == "array" and isinstance(s.get("items"), dict):
        item = _resolve(s["items"], defs)
        text = "list of " + (" | ".join(map(str, item["enum"])) if "enum" in item else item.get("type", "any"))
    else:
        text = s.get("type", "any") + (": " + " | ".join(str(e) for e in s["enum"]) if "enum" in s else "")
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        text += f", {sign} {s[key]}" if key in s else ""
    text += ", unique" if s.get("uniqueItems") else ""
    return text + (" or null" if s.get("nullable") else "")


def _default(s: dict) -> str:
    if "default" not in s:
        return ""
    if isinstance(s["default"], dict) and s.get("properties"):
        return "(see keys)"
    return "`" + json.dumps(s["default"], ensure_ascii=False).replace("|", "\\|") + "`"  # a pipe would end the cell


def _cell(text) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def rows(s: dict, defs: dict, prefix=""):
    for key, sub in s.get("properties", {}).items():
        sub, path = _resolve(sub, defs), f"{prefix}{key}"
        req = " (required)" if key in s.get("required", ()) else ""
        yield f"| `{path}`{req} | {_cell(_type(sub, defs))} | {_default(sub)} | {_cell(sub.get('description'))} |"
        entry = next(iter(sub.get("patternProperties", {}).values()), sub.get("additionalProperties"))
        if sub.get("properties"):
            yield from rows(sub, defs, path + ".")
        elif isinstance(entry, dict) and _resolve(entry, defs).get("properties"):
            inner = _resolve(entry, defs)
            yield f"| `{path}.<name>` | {_cell(_type(inner, defs))} |  | one entry per name |"
            yield from rows(inner, defs, path + ".<name>.")
        elif isinstance(sub.get("items"), dict) and "$ref" in sub["items"]:
            yield from rows(_resolve(sub["items"], defs), defs, path + "[].")


PAGE = """# Configuration reference

<!-- Generated by `python -m orthrus.plan.config.generate` from the config model (orthrus/plan/config/);
     do not edit by hand (tests/test_schema_docs.py checks it is up to date). -->

DESCRIPTION

A key left out takes the default shown. `config.yaml` is the tiny CPU study; a file under `configs/`
is an overlay on it (`--configfile configs/paper.yaml`: the paper scale; the merge rule, what is
checked where and the shipped subject are in docs/USAGE.md); any key can also be set on the command
line, e.g. `--config threads=4`.

| key | type | default | description |
|---|---|---|---|
TABLE
"""


def docs_text() -> str:
    s = schema()
    table = "\n".join(rows(s, s["$defs"]))
    return PAGE.replace("DESCRIPTION", _cell(s["description"]), 1).replace("TABLE", table, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orthrus.plan.config.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is out of date")
    ap.add_argument("--schema", type=Path, default=SCHEMA, help=argparse.SUPPRESS)  # for the tests
    args = ap.parse_args(argv)
    stale = []
    for path, text in ((args.schema, schema_text()), (DOC, docs_text())):
        if args.check:
            stale += [] if path.exists() and path.read_text(encoding="utf-8") == text else [str(path)]
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        sys.stderr.write(
            f"out of date with the config model: {', '.join(stale)}; run python -m orthrus.plan.config.generate\n"
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
