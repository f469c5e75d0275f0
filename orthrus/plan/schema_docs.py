"""docs/CONFIG.md from workflow/schemas/config.schema.yaml: every key, its type, default and description.

    python -m orthrus.plan.schema_docs            # rewrite docs/CONFIG.md
    python -m orthrus.plan.schema_docs --check    # exit 1 if docs/CONFIG.md is out of date

tests/test_schema_docs.py runs the check.
"""

import argparse
import json
import sys
from pathlib import Path

import yaml

from orthrus.world.subject import REBUILD

ROOT = Path(__file__).resolve().parents[2]

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DOC = ROOT / "docs" / "CONFIG.md"


def _type(s: dict) -> str:
    t = s.get("type", "any")
    types = t if isinstance(t, list) else [t]
    out = []
    for t in types:
        if t == "array" and isinstance(s.get("items"), dict):
            item = s["items"]
            inner = " | ".join(item["enum"]) if "enum" in item else item.get("type", "any")
            out.append(f"list of {inner}")
        else:
            out.append(t)
    text = " or ".join(out)
    if "enum" in s:
        text += ": " + " | ".join(str(e) for e in s["enum"])
    if "minimum" in s:
        text += f", ≥ {s['minimum']}"
    if "exclusiveMinimum" in s:
        text += f", > {s['exclusiveMinimum']}"
    if "maximum" in s:
        text += f", ≤ {s['maximum']}"
    if s.get("uniqueItems"):
        text += ", unique"
    return text


def _default(s: dict) -> str:
    if "default" not in s:
        return ""
    d = s["default"]
    if d == {} and s.get("properties"):
        return "(see keys)"
    # a pipe, even inside a code span, would end the table cell (GFM): escape it
    return "`" + json.dumps(d, ensure_ascii=False).replace("|", "\\|") + "`"


def _cell(text) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _resolve(s: dict, defs: dict) -> dict:
    """A `{$ref: "#/$defs/x"}` schema replaced by its definition."""
    ref = s.get("$ref", "")
    return defs[ref.rsplit("/", 1)[-1]] if ref.startswith("#/$defs/") else s


def rows(schema: dict, prefix="", required=(), defs=None):
    defs = schema.get("$defs", {}) if defs is None else defs
    for key, s in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        req = " (required)" if key in required else ""
        yield f"| `{path}`{req} | {_cell(_type(s))} | {_default(s)} | {_cell(s.get('description'))} |"
        if s.get("properties"):
            yield from rows(s, path + ".", s.get("required", ()), defs)
        elif isinstance(s.get("additionalProperties"), dict) and s.get("type") == "object":
            inner = _resolve(s["additionalProperties"], defs)
            yield f"| `{path}.<name>` | {_cell(_type(inner))} |  | one entry per name |"
            yield from rows(inner, path + ".<name>.", inner.get("required", ()), defs)
        elif isinstance(s.get("items"), dict) and "$ref" in s["items"]:
            inner = _resolve(s["items"], defs)
            yield from rows(inner, path + "[].", inner.get("required", ()), defs)


CHECKED_WHERE = """## What is checked where

Every refusal is one line naming the key (or the file, line and field) and what to do.

| where | when | what |
|---|---|---|
| config files as data (`orthrus/plan/yaml_data.py`) | `orthrus check-config`; `snakemake -n`, before any job | more than data: `__use_yte__`, a YAML tag, an alias bomb, nesting over 64 levels, over 1 MiB; a `--config` value read as YAML likewise |
| the schema (`workflow/schemas/config.schema.yaml`, this page) | `orthrus check-config`; `snakemake -n`, before any job | one key: unknown, missing, type, range (e.g. `lr` ≤ 1, `analysis.near_tie` ≤ 2 logits, seeds 0 to 2^64 - 1, at most 4096 shards), names that would be path segments or options (models, grids, engines, benchmark tasks, eval domains); NaN and infinities; duplicate YAML keys. Integer-valued floats (`2.0`) are taken as integers |
| cross-key rules (`orthrus/plan/checks.py`) | `orthrus check-config`; `snakemake -n`, before any job | rules over two keys or the world: unique names, existing paths, the assisted decoder's draft, grids inside the decode grid; `block_size` below `max_len`; `offset_weights` of K-1 or K values, not all 0; `warmup_steps` below `max_steps`, or below epochs x (distillation prompts // global batch) where the prompt count is known (`prompts.distill_n`, the hf specs' `n`, `corpus.expected_rows`), and below `teacher.tiny.steps`; a global batch no larger than the distillation prompts; `mask_token_id` inside a tiny, shipped or local teacher's vocabulary; a variant's seed plus the global seed at most 2^64 - 1; no more corpus shards (or `--set-scatter corpus=N`) than distillation prompts, and `--set-scatter` counts 1 to 4096; a local or `file://` `prompts.eval_file` a regular file, not a device, FIFO, directory or file under /dev, /proc or /sys (an http(s) URL is read by the prompts job within its size cap and timeout) |
| `orthrus train` (`orthrus/distill/settings.py`, `loop.py`) | the training job, before any step | the same one-key and in-settings rules for a direct call; a warm-up that outlasts the run's steps computed from the corpus it reads; fewer sequences than one global batch |
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
`orthrus check-config FILE` before you pass it to `snakemake`.
""".splitlines()


def render() -> str:
    schema = yaml.safe_load(SCHEMA.read_text())
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m orthrus.plan.schema_docs` from workflow/schemas/config.schema.yaml;",
        "     do not edit by hand (tests/test_schema_docs.py checks it is up to date). -->",
        "",
        _cell(schema.get("description")),
        "",
        "Defaults are filled in by the schema when a key is left out. `config.yaml` is the tiny CPU",
        "study, `configs/paper.yaml` the paper scale (`--configfile configs/paper.yaml`); any key can",
        "also be set on the command line, e.g. `--config threads=4`.",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
        *rows(schema, "", schema.get("required", ())),
        "",
        "## The shipped subject",
        "",
        "The default studies one fixed teacher and draft (`teacher.source: shipped`,",
        "`teacher.draft.source: shipped`), as the paper studies one Qwen3-1.7B: a teacher trained in",
        "floating point differs from CPU to CPU, and every verdict with it. They live in",
        "`orthrus/world/subject/` with `subject.json` (each file's SHA-256, the settings, and a",
        "fingerprint of the world text each model learned from); the workflow refuses a damaged file",
        "before any job, and `orthrus subject check --world` (run by the tests) fails once the world",
        "generator no longer produces that text. Then rebuild the subject, with the pipeline's own",
        "teacher rules at `teacher.tiny`'s settings and seed 0, by the one command:",
        "",
        "```bash",
        REBUILD,
        "```",
        "",
        "`teacher.source: tiny` trains a teacher from scratch on every run (the smoke study does).",
        "",
        *CHECKED_WHERE,
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if docs/CONFIG.md is not what the schema gives")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run python -m orthrus.plan.schema_docs", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
