"""Config files are data: YAML read as plain values, or refused naming file, line and key.

Snakemake renders a config file that sets `__use_yte__` with YTE (its ?-expressions run as
Python, while the file is read) and reads one with PyYAML's full loader, which builds tagged Python
objects; an alias bomb expands exponentially in every walk over the parsed config; PyYAML keeps
the last of two equal keys without a word. So a file is checked on its YAML events (nothing
constructed, nothing expanded) before anything here loads it, and a parsed config is counted, not
walked, before it is checked (orthrus/plan/study_config.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from orthrus.errors import ConfigError

MAX_CONFIG_BYTES = 2**20
MAX_CONFIG_NODES = 100_000  # the paper's config has ~700; aliases count as often as they expand
MAX_CONFIG_DEPTH = 64


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
    """yaml_hazards of the file at `path` ([] when it does not exist: load_yaml says so)."""
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        return [f"{path}: not a regular file"]
    if path.stat().st_size > MAX_CONFIG_BYTES:
        return [f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config file"]
    return yaml_hazards(path.read_bytes().decode("utf-8", errors="replace"), str(path))


def load_yaml(path) -> dict:
    """The mapping a YAML (or JSON) config file holds, refusing what is more than data
    (yaml_hazards) and keys given twice (duplicate_keys): ConfigError naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{path}: {'not a regular file' if path.exists() else 'no such file'}"])
    try:
        problems = file_hazards(path) or duplicate_keys(path)
        if problems:
            raise ConfigError(problems)
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError([f"{path}: not YAML: {' '.join(str(e).split())}"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: holds {type(data).__name__}, not a mapping of config keys"])
    return data


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
