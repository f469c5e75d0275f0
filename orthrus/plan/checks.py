"""The config's cross-key rules, checked before any job, each problem one line naming its key
(`key.path: what is wrong`): the rules a schema cannot state (unique names, existing paths,
dependent keys, settings that would train or measure nothing; the training settings' own in
orthrus/plan/training_checks.py, the models' in orthrus/plan/model_checks.py). orthrus/plan/validate.py runs them after the schema.
The YAML hazards (tags, YTE, aliases, duplicate keys) are refused earlier, while
orthrus/plan/study_config.py reads the files (orthrus/plan/yaml_data.py).

Defaults from the schema are filled in, except inside objects marked `x-fill-defaults: false`
(a variant's training settings and the tiny teacher's): their commands apply the same defaults
(orthrus/distill/settings.py and orthrus/world/teacher.py DEFAULTS, from which orthrus/plan/settings
takes the schema's), and filling them here would change the rules' params, hence rerun existing results.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from orthrus.engines.runner import problems as engine_problems
from orthrus.plan.model_checks import (
    architecture_problems,
    device_problems,
    draft_problems,
    gguf_problems,
    path_problem,
    revision_problems,
    teacher_problems,
)
from orthrus.plan.sampling_checks import problems as sampling_problems
from orthrus.plan.training_checks import training_problems


def _kernel_problems(cfg: dict) -> list[str]:
    """A requested attention kernel that this installation cannot run, named with its key before
    any job starts: flash_attention_2 needs the flash_attn package (and a CUDA device)."""
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        return []
    uses = []

    def get(section, key):
        return (cfg.get(section) or {}).get(key)

    for key, section in (
        ("decode.attentions", get("decode", "attentions")),
        ("tpf.attentions", get("tpf", "attentions")),
    ):
        if "flash_attention_2" in (section or []):
            uses.append(key)
    for name, grid in (get("decode", "grids") or {}).items():
        if "flash_attention_2" in ((grid or {}).get("attentions") or []):
            uses.append(f"decode.grids.{name}.attentions")
    for key, value in (
        ("analysis.ppl_attention", get("analysis", "ppl_attention")),
        ("benchmarks.attention", get("benchmarks", "attention")),
    ):
        if value == "flash_attention_2":
            uses.append(key)
    return [
        f"{k}: flash_attention_2 needs the flash_attn package, which is not installed "
        "(pip install flash-attn on a CUDA machine, or choose eager / sdpa)"
        for k in uses
    ]


def cross_key_problems(cfg: dict, schema: dict, scatter: dict | None = None) -> list[str]:
    """Rules a schema cannot state: unique names, existing paths, dependent keys (the assisted
    decoder's draft among them), settings that would train or measure nothing; `scatter` is
    Snakemake's `--set-scatter` {name: count}."""
    props = schema["properties"]
    problems = _name_problems(cfg) + teacher_problems(cfg, props)
    problems += draft_problems(cfg, props)
    problems += _grid_problems(cfg)
    problems += _external_problems(cfg)
    problems += engine_problems(cfg)  # decode.engines, engines.* (orthrus/engines/runner.py)
    problems += architecture_problems(cfg)
    problems += gguf_problems(cfg)
    problems += _frontier_problems(cfg)
    problems += sampling_problems(cfg)
    problems += training_problems(cfg, props, scatter or {})
    problems += _benchmark_problems(cfg, props)
    problems += _kernel_problems(cfg)
    problems += revision_problems(cfg)
    problems += _prompt_and_corpus_problems(cfg)
    problems += device_problems(cfg)
    return [p for p in problems if p]


def _name_problems(cfg: dict) -> list[str]:
    """Every model name is a directory and a table label: one name, one model; an external
    checkpoint is a model directory or a hub id."""
    teacher = (cfg.get("teacher") or {}).get("name")
    models, external = cfg.get("models") or {}, cfg.get("external_models") or {}
    problems = [f"models.{name}: same name as teacher.name" for name in models if name == teacher]
    for name, path in external.items():
        if name == teacher:
            problems.append(f"external_models.{name}: same name as teacher.name")
        if name in models:
            problems.append(
                f"external_models.{name}: also a trained variant models.{name} (its training would leave the DAG)"
            )
        if isinstance(path, str):
            problems.append(path_problem(f"external_models.{name}", path))
    return problems


def _benchmark_problems(cfg: dict, props: dict) -> list[str]:
    """Benchmarks that would run nothing: no task, only code tasks without the opt-in, a per-task
    document count that misses a task or names one that does not run."""
    bench, problems = cfg.get("benchmarks") or {}, []
    if not bench.get("enabled", True):
        return []
    if not bench.get("tiny_tasks", True) and not bench.get("tasks"):
        problems.append("benchmarks.tasks: empty, but benchmarks are enabled without tiny_tasks")
    elif (
        not bench.get("tiny_tasks", True)
        and not bench.get("allow_code_eval")
        and all("humaneval" in t for t in bench["tasks"])
    ):
        problems.append(
            "benchmarks.tasks: every task runs model-written code, and benchmarks.allow_code_eval is "
            "false: opt in, or add tasks that do not (e.g. gsm8k, ifeval)"
        )
    docs = bench.get("n_docs")
    if isinstance(docs, dict):
        tiny = bench.get("tiny_tasks", True)
        runs = props["benchmarks"]["properties"]["tiny_tasks"]["items"]["enum"] if tiny is True else list(tiny or [])
        missing, idle = [t for t in runs if t not in docs], [t for t in docs if t not in runs]
        if missing:
            problems.append(
                f"benchmarks.n_docs: no count for {', '.join(missing)}, which benchmarks.tiny_tasks runs "
                "(a mapping names each task that runs)"
            )
        if idle:
            problems.append(
                f"benchmarks.n_docs: {', '.join(idle)} not in benchmarks.tiny_tasks, so its count would prepare nothing"
            )
    return problems


def _prompt_and_corpus_problems(cfg: dict) -> list[str]:
    """Prompt filters that drop every prompt, the evaluation file and its companions, the sources
    each prompt set and the corpus need."""
    prompts, corpus, problems = cfg.get("prompts") or {}, cfg.get("corpus") or {}, []
    if prompts.get("min_chars", 0) > prompts.get("max_chars", float("inf")):
        problems.append(
            f"prompts.min_chars: {prompts['min_chars']} exceeds prompts.max_chars "
            f"({prompts['max_chars']}): every prompt would be dropped"
        )
    eval_file = prompts.get("eval_file")
    split = prompts.get("eval_file_split")
    if prompts.get("source") == "hf" and not prompts.get("eval") and not eval_file:
        problems.append("prompts.eval: required (non-empty) when prompts.source is hf without prompts.eval_file")
    if eval_file:
        problems.append(_eval_file_problem(eval_file))
        problems += _eval_file_domain_problems(cfg, eval_file)
    for key in ("eval_file_sha256", "eval_duplicates", "eval_file_timeout", "eval_file_split"):
        if prompts.get(key) is not None and not eval_file:
            problems.append(f"prompts.{key}: set, but there is no prompts.eval_file for it to apply to")
    if corpus.get("source") == "hf":
        if not corpus.get("dataset"):
            problems.append("corpus.dataset: required when corpus.source is hf")
        elif re.search(r"[*?\[\]{}]", corpus["dataset"]) and Path(os.path.expanduser(corpus["dataset"])).exists():
            problems.append(
                f"corpus.dataset: the local path {corpus['dataset']!r} has glob characters (* ? [ ] {{ }}), "
                "which datasets reads as a pattern; rename or link the directory"
            )
    elif prompts.get("source") == "hf" and not prompts.get("distill") and not (eval_file and split):
        problems.append(
            "prompts.distill: required (non-empty) when corpus.source is generate and prompts.source "
            "is hf without prompts.eval_file_split (the teacher answers the distillation prompts)"
        )
    return problems


def _grid_problems(cfg: dict) -> list[str]:
    """decode.grids: each key a speculative decoder that runs (decode.decoders) or an Orthrus model
    (models, external_models), never both; each grid a subset of the decode grid (the ar-ref
    reference runs only there)."""
    decode = cfg.get("decode") or {}
    decoders = list(decode.get("decoders") or []) + list(decode.get("controls") or [])
    models = list(cfg.get("models") or {}) + list(cfg.get("external_models") or {})
    problems = []
    for key, grid in (decode.get("grids") or {}).items():
        if key in decoders and key in models:
            problems.append(
                f"decode.grids.{key}: {key!r} is both a decoder of decode.decoders / decode.controls "
                "and an Orthrus model; rename the model"
            )
        elif key not in decoders and key not in models:
            problems.append(
                f"decode.grids.{key}: {key!r} is neither a speculative decoder of decode.decoders or a "
                f"control of decode.controls {decoders} nor an Orthrus model of models / external_models "
                f"{models}"
            )
        for sub in ("precisions", "attentions"):
            extra = [v for v in (grid or {}).get(sub, []) if v not in decode.get(sub, [])]
            if extra:
                problems.append(
                    f"decode.grids.{key}.{sub}: {extra} not in decode.{sub} {decode.get(sub)} "
                    "(the ar-ref reference runs only there)"
                )
        per = (grid or {}).get("prompts_per_domain")
        if isinstance(per, dict):
            runs = (grid or {}).get("precisions") or decode.get("precisions") or []
            idle = [p for p in per if p not in runs]
            if idle:
                problems.append(
                    f"decode.grids.{key}.prompts_per_domain: {idle} not among the precisions these cells "
                    f"run {runs}, so the setting would decode nothing"
                )
    return problems


def _external_problems(cfg: dict) -> list[str]:
    """decode.external: names unique across every model of the study, a reference that is another entry
    (with none of its own), a file that exists unless a stand-in writes it, a cell inside the decode grid
    (the ar-ref reference runs only there). A cell left to the file's env is checked when the workflow
    reads it (orthrus.engines.ingest.cell)."""
    decode = cfg.get("decode") or {}
    entries = decode.get("external") or {}
    teacher = (cfg.get("teacher") or {}).get("name")
    others = {
        teacher: "teacher.name",
        **{m: f"models.{m}" for m in cfg.get("models") or {}},
        **{m: f"external_models.{m}" for m in cfg.get("external_models") or {}},
    }
    problems = []
    for name, e in entries.items():
        key = f"decode.external.{name}"
        if name in others:
            problems.append(f"{key}: same name as {others[name]} (a name is one model of the tables)")
        ref = e.get("reference")
        if ref is not None:
            if ref == name:
                problems.append(f"{key}.reference: the entry itself; name another entry, the engine's own plain run")
            elif ref not in entries:
                problems.append(f"{key}.reference: {ref!r} is not an entry of decode.external {sorted(entries)}")
            elif (entries[ref] or {}).get("reference") is not None:
                problems.append(
                    f"{key}.reference: {ref!r} has a reference of its own (decode.external.{ref}.reference); "
                    "a reference is a plain run, compared with the in-process ar-ref"
                )
        if e.get("stand_in"):
            problems += [
                f"{key}.{k}: required with {key}.stand_in (the stand-in runs at it)"
                for k in ("precision", "attention")
                if not e.get(k)
            ]
        elif not Path(os.path.expanduser(e["path"])).is_file():
            problems.append(f"{key}.path: no such file: {e['path']!r} (the engine's trajectory file, docs/EXTERNAL.md)")
        for k, grid in (("precision", "precisions"), ("attention", "attentions")):
            if e.get(k) and e[k] not in decode.get(grid, []):
                problems.append(
                    f"{key}.{k}: {e[k]!r} not in decode.{grid} {decode.get(grid)} (the ar-ref reference "
                    "it is compared with runs only there)"
                )
    return problems


def _frontier_problems(cfg: dict) -> list[str]:
    """frontier.model: an Orthrus model of the study (the loop it measures needs a diffusion view)."""
    frontier = cfg.get("frontier") or {}
    models = list(cfg.get("models") or {}) + list(cfg.get("external_models") or {})
    name = frontier.get("model")
    if frontier.get("enabled", True) and name is not None and name not in models:
        return [f"frontier.model: {name!r} is not an Orthrus model of models / external_models {models}"]
    return []


# Pseudo-file systems: their files can be endless (/dev/zero, /dev/urandom) or block (/proc/kmsg).
PSEUDO_ROOTS = ("/dev", "/proc", "/sys")


def _local_file_problem(key: str, value: str, path: str) -> str | None:
    """None for a regular file outside /dev, /proc and /sys; else the problem, naming `key`."""
    p = Path(os.path.expanduser(path))
    real = os.path.realpath(p)
    if any(real == r or real.startswith(r + "/") for r in PSEUDO_ROOTS):
        return f"{key}: {value!r} is a device or kernel file ({real}), which may never end; give a regular file"
    if p.exists() and not p.is_file():
        return f"{key}: {value!r} is not a regular file (a directory, named pipe or device never gives a prompt file)"
    if not p.is_file():
        return f"{key}: no such file: {value!r}" + ("" if path != value else " (nor an http(s)/file URL)")
    return None


def _eval_file_domain_problems(cfg: dict, eval_file: str) -> list[str]:
    """The domains the config names (sampling.two_sample.domains, where the in-process audit or an
    engine pair samples them) against a local eval_file's; a URL's are checked by the stage that
    reads it."""
    sampling = cfg.get("sampling") or {}
    named = (sampling.get("two_sample") or {}).get("domains") or []
    path = Path(os.path.expanduser(eval_file))
    if not (sampling.get("enabled") or sampling.get("engines")) or not named or not path.is_file():
        return []
    try:
        have = set(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return []  # the prompts stage names what is wrong with the file
    missing = [d for d in named if d not in have]
    return (
        [f"sampling.two_sample.domains: {missing} not in prompts.eval_file's domains {sorted(have)}"] if missing else []
    )


def _eval_file_problem(value: str) -> str | None:
    """None for an http(s) URL (the prompts job downloads it within its size cap and timeout), a
    file URL or local path naming a regular file outside /dev, /proc and /sys; else the problem."""
    scheme = value.split("://", 1)[0].lower() if "://" in value else None
    if scheme is None:
        return _local_file_problem("prompts.eval_file", value, value)
    if scheme not in ("http", "https", "file"):
        return f"prompts.eval_file: unsupported URL scheme {scheme!r} in {value!r} (http, https or file)"
    if scheme == "file":
        from urllib.parse import unquote, urlsplit

        url = urlsplit(value)
        if url.netloc not in ("", "localhost"):
            return (
                f"prompts.eval_file: file URL {value!r} names host {url.netloc!r}; a file URL is local (file:///path)"
            )
        return _local_file_problem("prompts.eval_file", value, unquote(url.path))
    return None
