"""What a rule hands its job: a config section as JSON, a decoding cell's options, the launcher,
a shard's index, a unique rule name (workflow/rules/*.smk)."""

from __future__ import annotations

import json
import re

from orthrus.options import DecodeOptions


def settings(section) -> str:
    """A config section as JSON for `orthrus <command> --config {params.cfg:q}`."""
    return json.dumps(section, sort_keys=True)


def launcher(gpus: int) -> str:
    """`orthrus`, or torchrun with one process per GPU when a job holds several."""
    return f"torchrun --standalone --nproc_per_node {gpus} -m orthrus.cli" if gpus > 1 else "orthrus"


def scatter_index(item: str) -> tuple[int, int]:
    """'2-of-4' -> (1, 4): the 0-based shard and the shard count."""
    i, n = item.split("-of-")
    return int(i) - 1, int(n)


def rule_name(base: str, used: set) -> str:
    """`base` made a valid identifier for a rule, not one in `used` (a suffix makes it unique)."""
    name = re.sub(r"\W", "_", base)
    unique, i = name, 1
    while unique in used:
        i += 1
        unique = f"{name}_{i}"
    used.add(unique)
    return unique


def cell_options(section: dict, decoder: str, precision: str, attention: str) -> str:
    """One decoding cell's whole setting as `DecodeOptions` JSON, built from the validated config
    (`section`: `decode`, or `decode` updated by `tpf`) by the one function that does it."""
    return DecodeOptions.from_config(section, decoder, precision, attention).to_json()
