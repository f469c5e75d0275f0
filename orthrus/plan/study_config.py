"""The study's config, read, defaulted and checked in one place, before any job.

`study_config` is the one way in: the Snakefile calls it first, however the workflow is started
(plain, `--profile profiles/slurm`, `--workflow-profile none`, `-n`, a SLURM job re-reading the
Snakefile), and `orthrus check-config FILE` calls it on a file before anyone runs it. It reads the
config files as data (orthrus/plan/yaml_data.py), lays them on the embedded config.yaml as overlays
(orthrus/plan/overlay.py states the rule), lays `--config` values over them typed by the model, and
validates the result with the model (orthrus/plan/config/: every key's type, default and rules, the
cross-key rules on the section that owns the keys, the whole study's on the root). Every problem is
one line naming its key, all of them in one ConfigError (orthrus/errors.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from orthrus.config import Problems, members, problems, step
from orthrus.errors import ConfigError
from orthrus.plan.config import StudyConfig
from orthrus.plan.overlay import merge, with_base
from orthrus.plan.yaml_data import load_yaml, size_problems, yaml_hazards

# what a run without `--configfile` studies: the config.yaml of its working directory
EMBEDDED = "config.yaml"


def load(files=(), values=None, scatter=None) -> StudyConfig:
    """The checked config: the YAML `files` read as data and laid in order on the embedded
    config.yaml as overlays (orthrus/plan/overlay.py), `values` laid over them (Snakemake's
    `--config`; with no files, a whole config given as a dict); `scatter`: Snakemake's
    `--set-scatter` {name: count}, checked with it. Raises ConfigError naming every problem.
    `values` is not changed."""
    values = dict(values or {})
    found = size_problems(values)
    if found:  # every walk below would take as long as the expansion
        raise ConfigError(found)
    config: dict = {}
    if files:  # `--configfile X` is config.yaml + X (naming config.yaml too changes nothing)
        files = with_base(files, EMBEDDED)
    for f in files:
        config = merge(config, load_yaml(f))
    return checked(merge(config, typed_overrides(values)), scatter)


def study_config(files=(), values=None, scatter=None) -> dict:
    """`load`'s config as the data Snakemake holds (`config`): every key with a default, the keys given."""
    return load(files, values, scatter).model_dump()


def checked(data: dict, scatter=None) -> StudyConfig:
    """`data` (a whole config) validated by the model, or ConfigError naming every problem."""
    try:
        return StudyConfig.model_validate(data, context={"scatter": dict(scatter or {})})
    except ValidationError as e:
        raise ConfigError(problems(e, data, StudyConfig)) from None
    except Problems as e:  # raised outside a validator: each line names its key
        raise ConfigError([f"{k}: {m}" if k else m for k, m in e.lines]) from None


def _takes_str(t) -> bool:
    for m in members(t):
        if m is str or get_origin(m) is Literal and any(isinstance(a, str) for a in get_args(m)):
            return True
    return False


def typed_overrides(overrides: dict, model: type[BaseModel] = StudyConfig) -> dict:
    """`--config` values as the model types them: Snakemake reads `decode={max_new_tokens: 8}` with
    YAML's base loader, so every nested value is a string ('8'), and a value it cannot parse stays one
    string. Where the model's key takes no string, the string is read as YAML (safe_load, after
    yaml_hazards) into a number, boolean, null, mapping or list; a key the model lacks is left as given
    (the model names it)."""

    def typed(value, t, where):
        if isinstance(value, dict):
            return {k: typed(v, step(t, k), f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [typed(v, step(t, i), f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str) and t is not None and not _takes_str(t):
            hazards = yaml_hazards(value, f"--config {where}")
            if hazards:
                raise ConfigError(hazards)
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                return value  # the model names the key and the type it wants
            return typed(parsed, t, where) if isinstance(parsed, (dict, list)) else parsed
        return value

    return {k: typed(v, step(model, k), k) for k, v in overrides.items()}


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

    Study(load(args.files or [Path(EMBEDDED)]))  # and what only the whole study shows
    sys.stdout.write(f"{' '.join(map(str, args.files or [EMBEDDED]))}: a valid study config\n")
    return 0
