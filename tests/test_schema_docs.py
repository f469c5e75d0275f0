"""docs/CONFIG.md is generated from the config schema and kept up to date."""

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def load():
    spec = importlib.util.spec_from_file_location("schema_docs", ROOT / "workflow/scripts/schema_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_config_doc_is_up_to_date():
    mod = load()
    assert (ROOT / "docs/CONFIG.md").read_text() == mod.render(), (
        "docs/CONFIG.md is out of date: run python workflow/scripts/schema_docs.py"
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
