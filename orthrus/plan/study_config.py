"""The study's config, read, defaulted and checked in one place, before any job.

`study_config` is the one way in: the Snakefile calls it first, however the workflow is started
(plain, `--profile profiles/slurm`, `--workflow-profile none`, `-n`, a SLURM job re-reading the
Snakefile), and `orthrus check-config FILE` calls it on a file before anyone runs it. It reads the
config files as data (orthrus/plan/yaml_data.py), lays them on the embedded config.yaml as overlays
(orthrus/plan/overlay.py states the rule), lays `--config` values over them typed by the schema,
fills the schema's defaults in and checks the schema and the cross-key rules (orthrus/plan/validate.py,
checks.py). Every problem is one line naming its key, all of them in one ConfigError
(orthrus/errors.py), which `Study` raises too for what only the whole study shows.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import yaml

from orthrus.errors import ConfigError
from orthrus.plan.overlay import merge, with_base
from orthrus.plan.schema import SCHEMA
from orthrus.plan.validate import check
from orthrus.plan.yaml_data import load_yaml, size_problems, yaml_hazards

# what a run without `--configfile` studies: the config.yaml of its working directory
EMBEDDED = "config.yaml"


def study_config(files=(), values=None, scatter=None) -> dict:
    """The checked config: the YAML `files` read as data and laid in order on the embedded
    config.yaml as overlays (orthrus/plan/overlay.py), `values` laid over them (Snakemake's
    `--config`; with no files, a whole config given as a dict), schema defaults filled in;
    `scatter`: Snakemake's `--set-scatter` {name: count}, checked with it. Raises
    ConfigError naming every problem. `values` is not changed."""
    values = dict(values or {})
    problems = size_problems(values)
    if problems:  # every walk below would take as long as the expansion
        raise ConfigError(problems)
    schema = _schema()
    config: dict = {}
    if files:  # `--configfile X` is config.yaml + X (naming config.yaml too changes nothing)
        files = with_base(files, EMBEDDED)
    for f in files:
        config = merge(config, load_yaml(f))
    config = merge(config, typed_overrides(values, schema))
    problems = check(config, schema, dict(scatter or {}))
    if problems:
        raise ConfigError(problems)
    return config


@functools.cache
def _schema() -> dict:
    # the repository's own file, read once per process (libyaml's loader where there is one: the
    # pure-Python one takes a third of a second on it); nothing here changes it
    return yaml.load(SCHEMA.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _types(schema: dict) -> list:
    t = schema.get("type", [])
    return t if isinstance(t, list) else [t]


def typed_overrides(overrides: dict, schema: dict) -> dict:
    """`--config` values as the schema types them: Snakemake reads `decode={max_new_tokens: 8}`
    with YAML's base loader, so every nested value is a string ('8'), and a value it cannot
    parse stays one string. Where the schema expects no string, the string is read as YAML
    (safe_load, after yaml_hazards) into a number, boolean, null, mapping or list."""
    defs = schema.get("$defs", {})

    def sub(node, key):
        props, extra = node.get("properties", {}), node.get("additionalProperties")
        s = props.get(key, extra if isinstance(extra, dict) else {})
        return defs.get(s["$ref"].rsplit("/", 1)[-1], {}) if "$ref" in s else s

    def retype(value, node, where):
        if isinstance(value, dict):
            return {k: retype(v, sub(node, k), f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            items = node.get("items") if isinstance(node.get("items"), dict) else {}
            return [retype(v, items, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str) and _types(node) and "string" not in _types(node):
            hazards = yaml_hazards(value, f"--config {where}")
            if hazards:
                raise ConfigError(hazards)
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                return value  # the schema names the key and the type it wants
            return retype(parsed, node, where) if isinstance(parsed, (dict, list)) else parsed
        return value

    return {k: retype(v, sub(schema, k), k) for k, v in overrides.items()}


def main(argv=None) -> int:
    """`orthrus check-config FILE...`: check config files as the workflow would, before any run."""
    ap = argparse.ArgumentParser(
        prog="orthrus check-config",
        description="Check study config files as `snakemake --configfile FILE...` would, without running "
        "anything they hold: Snakemake renders a file that sets __use_yte__ (running its ?-expressions) "
        "before the workflow can refuse it, so check a config you did not write with this first. Run it in "
        "the directory the workflow runs in (paths in the config are relative to it).",
    )
    ap.add_argument("files", nargs="*", type=Path, help=f"overlays, laid on {EMBEDDED} in order (default: none)")
    args = ap.parse_args(argv)
    from orthrus.plan import Study

    Study(study_config(args.files or [Path(EMBEDDED)]))  # and what only the whole study shows
    sys.stdout.write(f"{' '.join(map(str, args.files or [EMBEDDED]))}: a valid study config\n")
    return 0
