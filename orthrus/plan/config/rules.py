"""The whole study's rules over its models' sources and its environment (StudyConfig's validator runs
them): the assisted decoder's draft, the families the loop runs on, the kernels this installation has,
pinned revisions, the prompt sets the corpus needs, the evaluation file's domains, the device, and the
engines (whose own rules are orthrus/engines/runner.py's, over the checked config)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from orthrus import contracts
from orthrus.decoders import DECODER, names
from orthrus.models.hub import is_hub_id


def path_problem(value: str) -> str | None:
    """None when `value` is an existing model directory or looks like a hub id; else the problem."""
    local = Path(os.path.expanduser(value))
    if local.is_dir():
        return None if (local / "config.json").is_file() else f"{value!r} has no config.json (not a model directory)"
    return None if is_hub_id(value) else f"no such directory: {value!r} (nor a hub id owner/name)"


def study_problems(cfg) -> list[str]:
    problems = draft_problems(cfg) + architecture_problems(cfg) + kernel_problems(cfg)
    problems += revision_problems(cfg) + source_problems(cfg) + device_problems(cfg)
    return [p for p in problems if p] + engine_problems(cfg)


def name_problems(cfg) -> list[str]:
    """Every model name is a directory and a table label: one name, one model; an external checkpoint is a
    model directory or a hub id; decode.grids names a decoder that runs or an Orthrus model, never both."""
    teacher, models, lines = cfg.teacher.name, cfg.models, []
    lines += [(f"models.{m}", "same name as teacher.name") for m in models if m == teacher]
    for name, path in cfg.external_models.items():
        key = f"external_models.{name}"
        lines += [(key, "same name as teacher.name") if name == teacher else None, (key, path_problem(path))]
        if name in models:
            lines.append((key, f"also a trained variant models.{name} (its training would leave the DAG)"))
    others = {
        teacher: "teacher.name",
        **{m: f"models.{m}" for m in models},
        **{m: f"external_models.{m}" for m in cfg.external_models},
    }
    lines += [
        (f"decode.external.{n}", f"same name as {others[n]} (a name is one model of the tables)")
        for n in cfg.decode.external
        if n in others
    ]
    decoders, orthrus = [*cfg.decode.decoders, *cfg.decode.controls], cfg.orthrus_models
    for key in cfg.decode.grids:
        if key in decoders and key in orthrus:
            lines.append(
                (
                    f"decode.grids.{key}",
                    f"{key!r} is both a decoder of decode.decoders / decode.controls"
                    " and an Orthrus model; rename the model",
                )
            )
        elif key not in decoders and key not in orthrus:
            lines.append(
                (
                    f"decode.grids.{key}",
                    f"{key!r} is neither a speculative decoder of decode.decoders or"
                    f" a control of decode.controls {decoders} nor an Orthrus model of models / "
                    f"external_models {orthrus}",
                )
            )
    for section in (cfg.frontier, cfg.sampling):
        key = "frontier" if section is cfg.frontier else "sampling"
        if section.enabled and section.model is not None and section.model not in orthrus:
            lines.append(
                (f"{key}.model", f"{section.model!r} is not an Orthrus model of models / external_models {orthrus}")
            )
    grid = cfg.decode.precisions
    if cfg.sampling.enabled:
        lines += [
            ("sampling.precisions", f"{p!r} is not in decode.precisions {grid}")
            for p in cfg.sampling.precisions or []
            if p not in grid
        ]
    return [f"{k}: {m}" for k, m in filter(None, lines) if m]


def draft_problems(cfg) -> list[str]:
    """The assisted decoder's draft (teacher.draft): required for it, and able to share the teacher's
    tokenizer (a tiny draft is trained with it; a hub draft cannot have the tiny teacher's, which is
    trained on the tiny world)."""
    teacher, draft = cfg.teacher, cfg.teacher.draft
    if not any(DECODER[d].needs_draft for d in cfg.decode.decoders):
        return []
    if not draft:
        return ["teacher.draft: required: decode.decoders has 'assisted', which needs teacher.draft (the draft model)"]
    if draft.source == "hf":
        if not draft.path:
            return ["teacher.draft.path: required when teacher.draft.source is hf"]
        if teacher.source in ("tiny", "shipped"):
            return [
                f"teacher.draft.path: the draft model teacher.draft.path={draft.path!r} cannot share the tokenizer of "
                f"the tiny teacher teacher.source={teacher.source!r} (its tokenizer is trained on the tiny world); use"
                " teacher.draft.source tiny, or an hf teacher with the draft's tokenizer"
            ]
        problem = path_problem(draft.path)
        return [f"teacher.draft.path: {problem}"] if problem else []
    if draft.source == "shipped" and teacher.source != "shipped":
        return [
            f"teacher.draft.source: the shipped draft has the shipped teacher's tokenizer, not that of "
            f"teacher.source={teacher.source!r}; use teacher.draft.source tiny"
        ]
    if "vocab_size" in draft.tiny.model_fields_set:
        return [
            "teacher.draft.tiny.vocab_size: the tiny draft takes the tokenizer of the teacher; leave its vocabulary "
            "to the teacher"
        ]
    return []


def architecture_problems(cfg) -> list[str]:
    """A local hf teacher of a family Orthrus is not built on (Mistral, Gemma, Qwen2, ...) is the reference
    of the decoders that need no diffusion view (ar-ref, assisted, prompt-lookup, ar-batched, external
    files); what runs this package's loop on it needs a family of contracts.ORTHRUS_FAMILIES, each named by
    its key. A hub teacher is checked when a stage loads it."""
    teacher = cfg.teacher
    path = Path(os.path.expanduser(str(teacher.path or "")))
    if teacher.source != "hf" or not (path / "config.json").is_file():
        return []
    try:
        kind = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return []  # the loader names what is wrong with it
    if kind in (None, *contracts.ORTHRUS_FAMILIES):
        return []
    why = (
        f"needs a teacher of the families {list(contracts.ORTHRUS_FAMILIES)}, and teacher.path {teacher.path!r} is a "
        f"{kind!r} model (any causal LM is the reference of ar-ref, assisted, prompt-lookup, ar-batched and "
        "decode.external)"
    )
    problems = [f"models.{m}: an Orthrus variant is distilled from the teacher's AR view: it {why}" for m in cfg.models]
    problems += [
        f"decode.controls: the {c} runs the Orthrus loop on the teacher: it {why}"
        for c in names(runner="loop", model="teacher")
        if c in cfg.decode.controls
    ]
    if cfg.benchmarks.enabled and cfg.benchmarks.ar_baseline != "hf":
        problems.append(
            f"benchmarks.ar_baseline: {cfg.benchmarks.ar_baseline!r} runs the teacher through the Orthrus package's "
            f"AR loop: it {why}; set it to hf"
        )
    return problems


def kernel_problems(cfg) -> list[str]:
    """A requested attention kernel that this installation cannot run, named with its key before any job
    starts: flash_attention_2 needs the flash_attn package (and a CUDA device)."""
    if importlib.util.find_spec("flash_attn") is not None:
        return []
    lists = {"decode.attentions": cfg.decode.attentions, "tpf.attentions": cfg.tpf.attentions}
    lists |= {f"decode.grids.{n}.attentions": g.attentions or [] for n, g in cfg.decode.grids.items()}
    one = {"analysis.ppl_attention": cfg.analysis.ppl_attention, "benchmarks.attention": cfg.benchmarks.attention}
    uses = [k for k, v in lists.items() if "flash_attention_2" in v] + [
        k for k, v in one.items() if v == "flash_attention_2"
    ]
    return [
        f"{k}: flash_attention_2 needs the flash_attn package, which is not installed (pip install flash-attn on a "
        "CUDA machine, or choose eager / sdpa)"
        for k in uses
    ]


def revision_problems(cfg) -> list[str]:
    """Each key of `revisions` is a hub id the config loads (a pin that applies nowhere is a typo)."""
    draft = cfg.teacher.draft
    loaded = {cfg.teacher.path, draft.path if draft else None, cfg.corpus.dataset, *cfg.external_models.values()}
    return [
        f"revisions.{key}: not a hub id this config loads (teacher.path, teacher.draft.path, external_models, "
        "corpus.dataset)"
        for key in cfg.revisions
        if key not in loaded
    ]


def source_problems(cfg) -> list[str]:
    """The distillation prompts the corpus needs, and the domains the config names against a local
    eval_file's (sampling.two_sample.domains, where the in-process audit or an engine pair samples them;
    a URL's are checked by the stage that reads it)."""
    prompts, sampling, problems = cfg.prompts, cfg.sampling, []
    if cfg.corpus.source != "hf" and prompts.source == "hf" and not prompts.distill:
        if not (prompts.eval_file and prompts.eval_file_split):
            problems.append(
                "prompts.distill: required (non-empty) when corpus.source is generate and prompts.source is hf "
                "without prompts.eval_file_split (the teacher answers the distillation prompts)"
            )
    named = sampling.two_sample.domains or []
    path = Path(os.path.expanduser(prompts.eval_file or ""))
    if not (sampling.enabled or sampling.engines) or not named or not prompts.eval_file or not path.is_file():
        return problems
    try:
        have = set(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return problems  # the prompts stage names what is wrong with the file
    missing = [d for d in named if d not in have]
    if missing:
        problems.append(f"sampling.two_sample.domains: {missing} not in prompts.eval_file's domains {sorted(have)}")
    return problems


def device_problems(cfg) -> list[str]:
    """The shipped tiny subject is a CPU study: on a GPU its 1.1M parameters run slower than on one core (on an
    H200 shared by 8 jobs its bf16 reference took 124 s, about 60 s on one core of a 2-core CPU) and its products
    (K of 128-384) say nothing about a GPU's kernels; the GPU study is configs/gpu.yaml."""
    device = cfg.decode.device
    if device == "cpu" or cfg.teacher.source != "shipped":
        return []
    return [
        f"decode.device: {device!r} with the shipped tiny teacher (teacher.source shipped), which belongs on the "
        "CPU: its 1.1M parameters decode slower on a GPU than on one core and its numbers say nothing about GPU "
        "kernels. Keep decode.device: cpu (the default: every stage stays on the CPU, also on a GPU machine), "
        "and study the GPU with the GPU-shaped world: snakemake --configfile configs/gpu.yaml --cores 16 "
        "(docs/GPU.md)"
    ]


def engine_problems(cfg) -> list[str]:
    """decode.engines (orthrus/engines/runner.py) and sampling.engines' entries as their engines take them
    (as data, orthrus/engines/engine.py), and each engine's program where an entry needs it."""
    from orthrus.engines.runner import ENGINES
    from orthrus.engines.runner import problems as decode_engine_problems

    out, engines = decode_engine_problems(cfg), cfg.sampling.engines
    entries = {n: e.model_dump() for n, e in engines.items()}
    for n, e in engines.items():
        if e.engine in ENGINES:
            out += ENGINES[e.engine].entry_problems(f"sampling.engines.{n}", entries[n], cfg)
    for engine in ENGINES.values():
        mine = [n for n, e in engines.items() if e.engine == engine.name]
        problem = (
            engine.problem(cfg, [f"sampling.engines.{n}" for n in mine], [entries[n] for n in mine]) if mine else None
        )
        out += [problem] if problem else []
    return out
