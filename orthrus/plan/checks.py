"""The config's cross-key rules, checked before any job, each problem one line naming its key
(`key.path: what is wrong`): the rules a schema cannot state (unique names, existing paths,
dependent keys, settings that would train or measure nothing; the training settings' own in
orthrus/plan/training_checks.py). orthrus/plan/validate.py runs them after the schema.
The YAML hazards (tags, YTE, aliases, duplicate keys) are refused earlier, by
workflow/scripts/config_check.py, before Snakemake reads a file.

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

from orthrus import contracts
from orthrus.engines.runner import problems as engine_problems
from orthrus.models.hub import is_hub_id
from orthrus.plan.sampling_checks import problems as sampling_problems
from orthrus.plan.training_checks import code_defaults, training_problems, warmup_problem


def _revision_problems(cfg: dict) -> list[str]:
    """Each key of `revisions` is a hub id the config loads (a pin that applies nowhere is a typo)."""
    teacher = cfg.get("teacher") or {}
    loaded = {
        teacher.get("path"),
        (teacher.get("draft") or {}).get("path"),
        (cfg.get("corpus") or {}).get("dataset"),
        *(cfg.get("external_models") or {}).values(),
    }
    return [
        f"revisions.{key}: not a hub id this config loads (teacher.path, teacher.draft.path, "
        "external_models, corpus.dataset)"
        for key in (cfg.get("revisions") or {})
        if key not in loaded
    ]


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


def _path_problem(key: str, value: str) -> str | None:
    """None when `value` is an existing model directory or looks like a hub id; else the problem."""
    local = Path(os.path.expanduser(value))
    if local.is_dir():
        return (
            None
            if (local / "config.json").is_file()
            else f"{key}: {value!r} has no config.json (not a model directory)"
        )
    if is_hub_id(value):
        return None
    return f"{key}: no such directory: {value!r} (nor a hub id owner/name)"


def cross_key_problems(cfg: dict, schema: dict, scatter: dict | None = None) -> list[str]:
    """Rules a schema cannot state: unique names, existing paths, dependent keys (the assisted
    decoder's draft among them), settings that would train or measure nothing; `scatter` is
    Snakemake's `--set-scatter` {name: count}."""
    props = schema["properties"]
    problems = _name_problems(cfg) + _teacher_problems(cfg, props)
    problems += _draft_problems(cfg, props)
    problems += _grid_problems(cfg)
    problems += _external_problems(cfg)
    problems += engine_problems(cfg)  # decode.engines, engines.* (orthrus/engines/runner.py)
    problems += _architecture_problems(cfg)
    problems += _gguf_problems(cfg)
    problems += _frontier_problems(cfg)
    problems += sampling_problems(cfg)
    problems += training_problems(cfg, props, scatter or {})
    problems += _benchmark_problems(cfg, props)
    problems += _kernel_problems(cfg)
    problems += _revision_problems(cfg)
    problems += _prompt_and_corpus_problems(cfg)
    problems += _device_problems(cfg)
    return [p for p in problems if p]


def _device_problems(cfg: dict) -> list[str]:
    """The shipped tiny subject is a CPU study: on a GPU its 1.1M parameters run slower than on
    one core (on an H200 shared by 8 jobs its bf16 reference took 124 s, about 60 s on one core of a
    2-core CPU) and its products (K of 128-384) say nothing about a GPU's kernels; the GPU study is
    configs/gpu.yaml."""
    device = (cfg.get("decode") or {}).get("device", "cpu")
    if device == "cpu" or (cfg.get("teacher") or {}).get("source") != "shipped":
        return []
    return [
        f"decode.device: {device!r} with the shipped tiny teacher (teacher.source shipped), which belongs on the "
        "CPU: its 1.1M parameters decode slower on a GPU than on one core and its numbers say nothing about GPU "
        "kernels. Keep decode.device: cpu (the default: every stage stays on the CPU, also on a GPU machine), "
        "and study the GPU with the GPU-shaped world: snakemake --configfile configs/gpu.yaml --cores 16 "
        "(docs/GPU.md)"
    ]


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
            problems.append(_path_problem(f"external_models.{name}", path))
    return problems


def _teacher_problems(cfg: dict, props: dict) -> list[str]:
    """An hf teacher's path; the tiny teacher's heads, warm-up and domain weights."""
    teacher, problems = cfg.get("teacher") or {}, []
    if teacher.get("source") == "hf":
        if not teacher.get("path"):
            problems.append("teacher.path: required when teacher.source is hf")
        elif isinstance(teacher["path"], str):
            problems.append(_path_problem("teacher.path", teacher["path"]))
    tiny = {**code_defaults(props["teacher"]["properties"]["tiny"]), **(teacher.get("tiny") or {})}
    if tiny["num_heads"] % tiny["num_kv_heads"]:
        problems.append(
            f"teacher.tiny.num_heads: {tiny['num_heads']} is not a multiple of "
            f"teacher.tiny.num_kv_heads ({tiny['num_kv_heads']})"
        )
    problems.append(warmup_problem("teacher.tiny", tiny))
    weights = (teacher.get("tiny") or {}).get("domain_weights")
    domains = props["teacher"]["properties"]["tiny"]["properties"]["domain_weights"]["propertyNames"]["enum"]
    if weights and set(weights) >= set(domains) and not any(w > 0 for w in weights.values()):
        problems.append("teacher.tiny.domain_weights: every domain weighs 0: nothing to train on")
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


def _gguf_problems(cfg: dict) -> list[str]:
    """teacher.source gguf: the file given one way (a path, or a package and the file in it)."""
    teacher = cfg.get("teacher") or {}
    g = teacher.get("gguf") or {}
    if teacher.get("source") != "gguf":
        return [f"teacher.gguf.{k}: set, but teacher.source is not gguf" for k in sorted(g) if g[k] is not None]
    if bool(g.get("path")) == bool(g.get("package")):
        return ["teacher.gguf: give the GGUF file as `path`, or as `package` with `file` (one of the two)"]
    if g.get("package") and not g.get("file"):
        return ["teacher.gguf.file: required with teacher.gguf.package (the file's path inside the package)"]
    if g.get("path") and not Path(os.path.expanduser(g["path"])).is_file():
        return [f"teacher.gguf.path: no such file: {g['path']!r}"]
    return []


def _architecture_problems(cfg: dict) -> list[str]:
    """A local hf teacher of a family Orthrus is not built on (Mistral, Gemma, Qwen2, ...) is the
    reference of the decoders that need no diffusion view (ar-ref, assisted, prompt-lookup,
    ar-batched, external files); what runs this package's loop on it needs a family of
    contracts.ORTHRUS_FAMILIES, each named by its key. A hub teacher is checked when a stage loads it."""
    teacher = cfg.get("teacher") or {}
    path = Path(os.path.expanduser(str(teacher.get("path") or "")))
    if teacher.get("source") != "hf" or not (path / "config.json").is_file():
        return []
    try:
        kind = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return []  # the loader names what is wrong with it
    if kind in (None, *contracts.ORTHRUS_FAMILIES):
        return []
    why = (
        f"needs a teacher of the families {list(contracts.ORTHRUS_FAMILIES)}, and teacher.path {teacher['path']!r} is a {kind!r} model (any causal LM is the "
        "reference of ar-ref, assisted, prompt-lookup, ar-batched and decode.external)"
    )
    problems = [
        f"models.{m}: an Orthrus variant is distilled from the teacher's AR view: it {why}"
        for m in cfg.get("models") or {}
    ]
    if "oracle" in ((cfg.get("decode") or {}).get("controls") or []):
        problems.append(f"decode.controls: the oracle runs the Orthrus loop on the teacher: it {why}")
    bench = cfg.get("benchmarks") or {}
    if bench.get("enabled", True) and bench.get("ar_baseline") != "hf":
        problems.append(
            f"benchmarks.ar_baseline: {bench.get('ar_baseline')!r} runs the teacher through the Orthrus "
            f"package's AR loop: it {why}; set it to hf"
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


def _draft_problems(cfg: dict, props: dict) -> list[str]:
    """The assisted decoder's draft (teacher.draft): required for it, and able to share the
    teacher's tokenizer (a tiny draft is trained with it; a hub draft cannot have the tiny
    teacher's, which is trained on the tiny world)."""
    teacher = cfg.get("teacher", {})
    draft = teacher.get("draft")
    if "assisted" not in (cfg.get("decode") or {}).get("decoders", []):
        return []
    if not draft:
        return ["teacher.draft: required: decode.decoders has 'assisted', which needs teacher.draft (the draft model)"]
    problems = []
    if draft["source"] == "hf":
        if not draft.get("path"):
            problems.append("teacher.draft.path: required when teacher.draft.source is hf")
        elif teacher.get("source") in ("tiny", "shipped"):
            problems.append(
                f"teacher.draft.path: the draft model teacher.draft.path={draft['path']!r} cannot share "
                f"the tokenizer of the tiny teacher teacher.source={teacher['source']!r} (its tokenizer is "
                "trained on the tiny world); use teacher.draft.source tiny, or an hf teacher with the "
                "draft's tokenizer"
            )
        else:
            problems.append(_path_problem("teacher.draft.path", draft["path"]))
    elif draft["source"] == "shipped" and teacher.get("source") != "shipped":
        problems.append(
            f"teacher.draft.source: the shipped draft has the shipped teacher's tokenizer, not that of "
            f"teacher.source={teacher.get('source')!r}; use teacher.draft.source tiny"
        )
    else:
        tiny = draft.get("tiny") or {}
        if "vocab_size" in tiny:
            problems.append(
                "teacher.draft.tiny.vocab_size: the tiny draft takes the tokenizer of the teacher; "
                "leave its vocabulary to the teacher"
            )
        tiny = {**code_defaults(props["teacher"]["properties"]["draft"]["properties"]["tiny"]), **tiny}
        if tiny["num_heads"] % tiny["num_kv_heads"]:
            problems.append(
                f"teacher.draft.tiny.num_heads: {tiny['num_heads']} is not a multiple of "
                f"teacher.draft.tiny.num_kv_heads ({tiny['num_kv_heads']})"
            )
        problems.append(warmup_problem("teacher.draft.tiny", tiny))
    return problems


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
