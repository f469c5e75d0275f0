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
is an overlay on it (`--configfile configs/paper.yaml`: the paper scale); any key can also be set on
the command line, e.g. `--config threads=4`.

| key | type | default | description |
|---|---|---|---|
TABLE

## The shipped subject

The default studies one fixed teacher and draft (`teacher.source: shipped`,
`teacher.draft.source: shipped`), as the paper studies one Qwen3-1.7B: a teacher trained in
floating point differs from CPU to CPU, and every verdict with it. They live in
`orthrus/world/subject/` with `subject.json` (each file's SHA-256, the settings, and a
fingerprint of the world text each model learned from); the workflow refuses a damaged file
before any job, and `orthrus subject check --world` (run by the tests) fails once the world
generator no longer produces that text. Then rebuild the subject, with the pipeline's own
teacher rules at `teacher.tiny`'s settings and seed 0, by the one command:

```bash
REBUILD
```

`teacher.source: tiny` trains a teacher from scratch on every run (the smoke study does).

## What is checked where

Every refusal is one line naming the key (or the file, line and field) and what to do.

| where | when | what |
|---|---|---|
| config files as data (`orthrus/plan/yaml_data.py`) | `orthrus check-config`; `snakemake -n`, before any job | more than data: `__use_yte__`, a YAML tag, an alias bomb, nesting over 64 levels, over 1 MiB; duplicate YAML keys; a `--config` value read as YAML likewise |
| the config model (`orthrus/plan/config/`, this page) | `orthrus check-config`; `snakemake -n`, before any job | one key: unknown, missing, type, range (e.g. `lr` ≤ 1, `analysis.near_tie` ≤ 2 logits, seeds 0 to 2^64 - 1, at most 4096 shards), names that would be path segments or options (models, grids, engines, benchmark tasks, eval domains); NaN and infinities. Integer-valued floats (`2.0`) are taken as integers |
| its sections' rules (the validators of `orthrus/plan/config/*.py`) | `orthrus check-config`; `snakemake -n`, before any job | rules over a section's keys: `block_size` below `max_len`; `offset_weights` of K-1 or K values, not all 0; `warmup_steps` below `max_steps` and below `teacher.tiny.steps`; grids inside the decode grid; a local or `file://` `prompts.eval_file` a regular file, not a device, FIFO, directory or file under /dev, /proc or /sys (an http(s) URL is read by the prompts job within its size cap and timeout) |
| the whole study's rules (`study.py`, `rules.py`, `training.py` there) | `orthrus check-config`; `snakemake -n`, before any job | unique names, existing paths, the assisted decoder's draft, grids naming a decoder or a model; `warmup_steps` below epochs x (distillation prompts // global batch) where the prompt count is known (`prompts.distill_n`, the hf specs' `n`, `corpus.expected_rows`); a global batch no larger than the distillation prompts; `mask_token_id` inside a tiny, shipped or local teacher's vocabulary; a variant's seed plus the global seed at most 2^64 - 1; no more corpus shards (or `--set-scatter corpus=N`) than distillation prompts, and `--set-scatter` counts 1 to 4096; the engines' entries and programs |
| `orthrus train` (`orthrus/distill/settings.py`, `loop.py`) | the training job, before any step | the same section, so the same rules for a direct call; a warm-up that outlasts the run's steps computed from the corpus it reads; fewer sequences than one global batch |
| model loading (`orthrus/models/modeling.py`) | every job that loads a model (`orthrus decode`, `from_pretrained`) | missing, unexpected or misshaped tensors; integer-dtype or non-finite weights (file and tensor named); an Orthrus `config.json` whose `block_size` is below 2 or whose `mask_token_id` is outside the vocabulary; pickles unless opted in; never remote code |
| `orthrus ingest` (`orthrus/engines/ingest.py`) | the ingest job of each `decode.external` file | each record against the prompt set, the tokenizer and the study's settings; a file decoded with another token budget (`finish_reason: length` before `max_new_tokens`, early ends without a stop id in bulk, echoed `settings` other than the study's) |

The config is read, defaulted and checked in one place, `study_config` (`orthrus/plan/study_config.py`),
which the Snakefile calls before any rule, however the workflow is started (plain, `--profile
profiles/slurm`, `--workflow-profile none`, `-n`); `orthrus check-config FILE...` runs the same check
on files without running the workflow.

**A config file is data, but Snakemake renders a `__use_yte__` file first.** Snakemake reads every
`--configfile` while it parses its command line, and renders one that sets `__use_yte__` as a YTE
template (its `?` expressions run as Python) then, before any code of this workflow runs; no setting
turns that off, and the profiles hold no code. The Snakefile then refuses the file, naming it, so the
run stops before any job, but after the expressions ran. The embedded `config.yaml` is read by the
Snakefile alone and never rendered. So check a config file you did not write with
`orthrus check-config FILE` before you pass it to `snakemake`."""


def docs_text() -> str:
    from orthrus.world.subject import REBUILD

    s = schema()
    table = "\n".join(rows(s, s["$defs"]))
    return (
        PAGE.replace("DESCRIPTION", _cell(s["description"]), 1)
        .replace("TABLE", table, 1)
        .replace("REBUILD", REBUILD, 1)
    )


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
