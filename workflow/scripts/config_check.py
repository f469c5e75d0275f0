"""The YAML guard: config files are data, refused before Snakemake acts on them.

A config file or `--config` value with a YAML tag (`!!python/...`), YTE (`__use_yte__`), an
alias bomb or a duplicate key (PyYAML, and so Snakemake, silently keeps the last value) is
refused here, naming file, line and key. The workflow profile runs `guard_argv` on the command
line before Snakemake reads a `--configfile`; the Snakefile runs `refuse_hazards` and
`check_config`, which after this guard checks the schema and the cross-key rules in the package
(orthrus/plan/checks.py). Only yaml (which Snakemake itself needs) at import time, so the profile
can run it before anything else. Every problem is one line, `key.path: what is wrong`.
"""

from __future__ import annotations

from pathlib import Path

import yaml


class ConfigError(ValueError):
    """A list of configuration problems, one per line, each naming its key path."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


# --------------------------------------------------------------------------- YAML


def duplicate_keys(path) -> list[str]:
    """`file:line: key.path: duplicate key` for every mapping key given twice in a YAML file
    (PyYAML, and so Snakemake, silently keeps the last value)."""
    text = Path(path).read_text(encoding="utf-8")
    problems = []

    def walk(node, prefix):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else str(key)
                dotted = f"{prefix}{name}"
                if name in seen:
                    problems.append(
                        f"{path}:{key.start_mark.line + 1}: {dotted}: duplicate key "
                        f"(first given on line {seen[name] + 1})"
                    )
                seen.setdefault(name, key.start_mark.line)
                walk(value, dotted + ".")
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{prefix[:-1]}[{i}]." if prefix else f"[{i}].")

    for document in yaml.compose_all(text, Loader=yaml.SafeLoader):
        walk(document, "")
    return problems


# A config file is data. Snakemake renders one with YTE (Python expressions, run while the file
# is read) when it sets `__use_yte__`, and reads it with PyYAML's full loader, which builds tagged
# Python objects; an alias bomb expands exponentially in every walk over the parsed config. So a
# file is checked on its YAML events (nothing constructed, nothing expanded) before anything loads it.
MAX_CONFIG_BYTES = 2**20
MAX_CONFIG_NODES = 100_000  # the paper's config has ~700; aliases count as often as they expand
MAX_CONFIG_DEPTH = 64


def yaml_hazards(text: str, where: str) -> list[str]:
    """One line naming `where` (a file or a `--config` entry) and the line for what makes a YAML
    text more than data: `__use_yte__` at the top level, an explicit tag (`!!python/...`,
    `!tag`), more than MAX_CONFIG_NODES values once aliases are expanded, deeper nesting than
    MAX_CONFIG_DEPTH, or more than MAX_CONFIG_BYTES; [] for plain data (or text that is not YAML,
    which the loader itself reports)."""
    if len(text) > MAX_CONFIG_BYTES:
        return [f"{where}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config file"]
    anchors, stack = {}, []  # per open collection: [is a mapping, items read, values it expands to, anchor]
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            line = f"{where}:{ev.start_mark.line + 1}"
            if isinstance(ev, yaml.NodeEvent) and getattr(ev, "tag", None) is not None:
                return [f"{line}: YAML tag {ev.tag!r} refused: a config file is plain data (no tags)"]
            if isinstance(ev, yaml.CollectionStartEvent):
                stack.append([isinstance(ev, yaml.MappingStartEvent), 0, 1, ev.anchor])
                if len(stack) > MAX_CONFIG_DEPTH:
                    return [f"{line}: nested deeper than {MAX_CONFIG_DEPTH} levels; not a config file"]
                continue
            if isinstance(ev, yaml.ScalarEvent):
                top_key = len(stack) == 1 and stack[0][0] and stack[0][1] % 2 == 0
                if top_key and ev.value == "__use_yte__":
                    return [
                        f"{line}: __use_yte__ refused: a config file is data, not a YTE template "
                        "(its ?-expressions would run as Python)"
                    ]
                size = 1
                if ev.anchor:
                    anchors[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                size = anchors.get(ev.anchor, 1)
            elif isinstance(ev, yaml.CollectionEndEvent):
                _, _, size, anchor = stack.pop()
                if anchor:
                    anchors[anchor] = size
            else:
                continue
            if stack:
                stack[-1][1] += 1
                stack[-1][2] += size
                if stack[-1][2] > MAX_CONFIG_NODES:
                    return [
                        f"{line}: expands to more than {MAX_CONFIG_NODES} values through its aliases "
                        "(a YAML alias bomb?); not a config file"
                    ]
    except yaml.YAMLError:
        return []
    return []


def file_hazards(path) -> list[str]:
    """yaml_hazards of the file at `path` ([] when it does not exist: the loader says so)."""
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        return [f"{path}: not a regular file"]
    if path.stat().st_size > MAX_CONFIG_BYTES:
        return [f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config file"]
    return yaml_hazards(path.read_bytes().decode("utf-8", errors="replace"), str(path))


def refuse_hazards(paths) -> None:
    """ConfigError naming each config file in `paths` that is more than data (yaml_hazards)."""
    problems = [p for f in paths for p in file_hazards(f)]
    if problems:
        raise ConfigError(problems)


def argv_sources(argv) -> tuple[list[str], list[str]]:
    """(the `--configfile`/`--configfiles` files, the `--config key=value` entries) of a snakemake
    command line, each option taking the words up to the next option, as the CLI reads them."""
    files, values, taking = [], [], None
    for a in argv:
        opt, eq, rest = a.partition("=")
        if opt in ("--configfile", "--configfiles", "--config", "-C"):
            taking = values if opt in ("--config", "-C") else files
            if eq:
                taking.append(rest)
                taking = None
            continue
        if taking is not None and not a.startswith("-"):
            taking.append(a)
        else:
            taking = None
    return files, values


def guard_argv(argv) -> None:
    """Refuse, before Snakemake reads them, the config files and `--config` values of a snakemake
    command line that are more than data: one line on stderr, exit 1. Called by the workflow
    profile (profiles/default/config.yaml), which Snakemake reads before any config file."""
    import sys

    files, values = argv_sources(argv)
    problems = [p for f in files for p in file_hazards(f)]
    for v in values:
        key, _, text = v.partition("=")
        problems += yaml_hazards(text, f"--config {key}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        sys.stderr.write(f"snakemake: config refused: {problems[0]}{more}\n")
        raise SystemExit(1)


def size_problems(config) -> list[str]:
    """The parsed config is bounded too (a `--config` value, or a file read without the guard):
    counting stops at MAX_CONFIG_NODES, so a structure of shared references cannot stall it."""
    count, todo = 0, [config]
    while todo:
        node = todo.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            return [f"(top level): more than {MAX_CONFIG_NODES} values (a YAML alias bomb?); not a config"]
        if isinstance(node, dict):
            todo += node.values()
        elif isinstance(node, list):
            todo += node
    return []


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


def load_yaml(path) -> dict:
    """A YAML config file, refusing what is more than data (yaml_hazards) and duplicate keys."""
    problems = file_hazards(path) or duplicate_keys(path)
    if problems:
        raise ConfigError(problems)
    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def check_config(config: dict, schema_path, files=(), scatter=None) -> dict:
    """Refuse the YAML hazards of the config `files` Snakemake read, then fill defaults into
    `config` (in place) and check it against the schema and the cross-key rules
    (orthrus/plan/validate.py, checks.py); raise ConfigError naming every problem. `scatter`: Snakemake's
    `--set-scatter` {name: count}, checked with the config."""
    problems = size_problems(config)
    if problems:  # every walk below would take as long as the expansion
        raise ConfigError(problems)
    problems = [p for f in files if Path(f).is_file() for p in file_hazards(f) or duplicate_keys(f)]
    from orthrus.plan.validate import check

    problems += check(config, yaml.safe_load(Path(schema_path).read_text(encoding="utf-8")), scatter)
    if any(p.endswith(": required key missing") for p in problems) and files:
        # the Snakefile studies a --configfile instead of config.yaml, never on top of it
        problems.append(
            f"(--configfile {' '.join(map(str, files))} replaces the embedded config.yaml: give a whole config "
            "such as configs/gpu.yaml, or name both, config.yaml first: --configfile config.yaml my-overlay.yaml)"
        )
    if problems:
        raise ConfigError(problems)
    return config
