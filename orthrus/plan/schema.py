"""The config schema, generated from the typed settings (orthrus/plan/settings/).

Every key of the config, its type, default, description and rules is stated once, in
orthrus/plan/settings/; a default that a settings object of the package holds is taken from it: a
variant's training settings (orthrus/distill/settings.py), the tiny teacher's
(orthrus/world/teacher.py), the decoding options (orthrus/options.py: `DecodeOptions` and
the controls' sizes), the verdicts' rounding bound (orthrus/audit/verdict.py), the frontier's
settings (orthrus/decode/frontier.py). The committed schema (workflow/schemas/config.schema.yaml,
which Snakemake validates with) is written from them, and docs/CONFIG.md from the schema
(orthrus/plan/schema_docs.py).

    python -m orthrus.plan.schema            # rewrite workflow/schemas/config.schema.yaml
    python -m orthrus.plan.schema --check    # exit 1 if it is out of date (tests/test_plan.py)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
HEADER = (
    "# Generated from the typed settings in orthrus/plan/settings/ by `python -m orthrus.plan.schema`;\n"
    "# do not edit by hand (tests/test_plan.py fails when this file differs from what they generate).\n"
)


class _Dumper(yaml.SafeDumper):
    # the settings share blocks (teacher.tiny's keys, the precision enum) as Python objects; the file
    # spells each out where it applies, so that a reader of one key needs no anchor elsewhere
    def ignore_aliases(self, data):
        return True


def _mapping(dumper: yaml.SafeDumper, data: dict):
    # a key that fits a line (`{type: integer, minimum: 1, default: 4, description: ...}`) on one,
    # the way a reader scans a section; a longer one, or an object with nested settings, as a block
    flat = all(not isinstance(v, (dict, list)) or _scalars(v) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flat and len(json.dumps(data)) <= 100)


def _scalars(v) -> bool:
    return isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v)


def _list(dumper: yaml.SafeDumper, data: list):
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=_scalars(data))


def _str(dumper: yaml.SafeDumper, data: str):
    # long descriptions folded (`>-`), a line break where the text has a space, as written by hand
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=">" if len(data) > 80 else None)


_Dumper.add_representer(dict, _mapping)
_Dumper.add_representer(list, _list)
_Dumper.add_representer(str, _str)


def render(schema: dict | None = None) -> str:
    """The schema file's text: `schema` (default: the typed settings' `SCHEMA`) as YAML, key order kept."""
    from orthrus.plan.settings import SCHEMA as SETTINGS
    from orthrus.plan.settings.keys import plain

    data = plain(SETTINGS if schema is None else schema)
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return HEADER + body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orthrus.plan.schema", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed schema is out of date")
    ap.add_argument("--schema", type=Path, default=SCHEMA, help=argparse.SUPPRESS)  # for the tests
    args = ap.parse_args(argv)
    new = render()
    if args.check:
        if not args.schema.exists() or args.schema.read_text(encoding="utf-8") != new:
            sys.stderr.write(
                f"{args.schema}: out of date with orthrus/plan/settings; run python -m orthrus.plan.schema\n"
            )
            return 1
        return 0
    from orthrus.io import atomic_path

    with atomic_path(args.schema) as tmp:
        tmp.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
