"""Configuration as plain data: a YAML/JSON file or inline JSON, and `--set key=value` overrides."""

from __future__ import annotations

import json
from pathlib import Path


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
