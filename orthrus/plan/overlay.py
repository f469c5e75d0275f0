"""Config files as overlays: how `snakemake --configfile X Y` lays X, then Y, on config.yaml.

The rule, stated once (docs/USAGE.md says it again for users):

- a mapping merges key by key into the one below it; a list or a scalar replaces what was there;
- a table of named entries (NAMED_TABLES, the config model's mapping fields: `models`,
  `external_models`, `decode.engines`, ...) replaces the one below whole, so a paper-scale overlay's
  models are its own, not beside the default's tiny variants;
- `$patch` (the key Kubernetes' strategic merge patches use), written inside a mapping, says otherwise
  there: `$patch: merge` merges a named table into the one below (to add or change one entry),
  `$patch: replace` replaces an ordinary mapping whole, and `key: {$patch: delete}` removes `key`,
  so its default applies (null cannot mean that: it is a value for several keys).

`--config` values are one more overlay, laid on the files last.
"""

from __future__ import annotations

from pathlib import Path

from orthrus.config import mapping_fields
from orthrus.errors import ConfigError
from orthrus.plan.config import StudyConfig

PATCH = "$patch"
# the default every file under configs/ is written against, beside the Snakefile
REPO_CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"

# tables keyed by names a config chooses (models, engines, tasks, domains, claims: every mapping field of
# the config model): an entry inherited from the file below would be a run nobody asked for, or a setting
# for a model that is not there
NAMED_TABLES = mapping_fields(StudyConfig)

_DELETE = object()


def with_base(files, embedded: str) -> list:
    """The files a run with `--configfile files` reads, in order: first the config a run without one
    studies (`embedded` in the working directory, or where it has none, as under `snakemake
    --directory` elsewhere, the repository's), then the overlays (naming that one too changes nothing)."""
    base = Path(embedded) if Path(embedded).is_file() else REPO_CONFIG
    return [base, *(f for f in files if Path(f).resolve() != base.resolve())]


def merge(base: dict, overlay: dict) -> dict:
    """A new config: `overlay` laid on `base` by the rule above, neither of them changed (the result
    owns its mappings and lists). Raises ConfigError naming every misused `$patch`."""
    problems: list[str] = []
    out = _lay(base, overlay, (), problems)
    if problems:
        raise ConfigError(problems)
    return {} if out is _DELETE else out


def _lay(below, over, path: tuple, problems: list[str]):
    if not isinstance(over, dict):
        return _copy(over)
    over = dict(over)
    how = over.pop(PATCH, None)
    where = ".".join(map(str, path + (PATCH,)))
    if how not in (None, "merge", "replace", "delete"):
        problems.append(f"{where}: {how!r} is not merge, replace or delete")
    elif how == "delete":
        if over:
            problems.append(f"{where}: delete removes the key whole; its mapping can hold nothing else")
        return _DELETE
    if how is None:
        how = "replace" if path in NAMED_TABLES else "merge"
    out = dict(below) if how == "merge" and isinstance(below, dict) else {}
    for key, value in over.items():
        sub = _lay(out.get(key), value, path + (key,), problems)
        if sub is _DELETE:
            out.pop(key, None)
        else:
            out[key] = sub
    return {k: _copy(v) for k, v in out.items()}


def _copy(value):
    # the merged config owns its mappings and lists: filling defaults in leaves the files' data alone
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return [_copy(v) for v in value] if isinstance(value, list) else value
