"""docs/CONFIG.md is generated from the config schema and kept up to date."""

from pathlib import Path

import yaml

from orthrus.plan import schema_docs

ROOT = Path(__file__).resolve().parents[1]


def test_config_doc_is_up_to_date():
    assert (ROOT / "docs/CONFIG.md").read_text() == schema_docs.render(), (
        "docs/CONFIG.md is out of date: run python -m orthrus.plan.schema_docs"
    )


def test_every_schema_key_is_documented():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    doc = (ROOT / "docs/CONFIG.md").read_text()

    def keys(s, prefix=""):
        for k, sub in s.get("properties", {}).items():
            yield prefix + k
            yield from keys(sub, prefix + k + ".")

    missing = [k for k in keys(schema) if f"| `{k}`" not in doc]
    assert not missing, missing
