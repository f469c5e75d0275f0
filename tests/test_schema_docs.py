"""docs/CONFIG.md is generated from the config model and kept up to date."""

from pathlib import Path

from orthrus.plan.config import generate

ROOT = Path(__file__).resolve().parents[1]


def test_config_doc_is_up_to_date():
    assert (ROOT / "docs/CONFIG.md").read_text() == generate.docs_text(), (
        "docs/CONFIG.md is out of date: run python -m orthrus.plan.config.generate"
    )


def test_every_schema_key_is_documented():
    schema = generate.schema()
    defs = schema["$defs"]
    doc = (ROOT / "docs/CONFIG.md").read_text()

    def keys(s, prefix=""):
        for k, sub in s.get("properties", {}).items():
            yield prefix + k
            yield from keys(generate._resolve(sub, defs), prefix + k + ".")

    found = list(keys(schema))
    missing = [k for k in found if f"| `{k}`" not in doc]
    assert len(found) > 200 and not missing, missing
