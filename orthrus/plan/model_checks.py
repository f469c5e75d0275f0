"""The config's rules about the models it studies, which a schema cannot state: the teacher's
source and shape, its draft (the assisted decoder's), a GGUF source, the architectures the loop
runs on, pinned hub revisions, and the device (orthrus/plan/checks.py runs them with the rest)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orthrus import contracts
from orthrus.decoders import DECODER, names
from orthrus.models.hub import is_hub_id
from orthrus.plan.training_checks import code_defaults, warmup_problem


def revision_problems(cfg: dict) -> list[str]:
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


def path_problem(key: str, value: str) -> str | None:
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


def device_problems(cfg: dict) -> list[str]:
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


def teacher_problems(cfg: dict, props: dict) -> list[str]:
    """An hf teacher's path; the tiny teacher's heads, warm-up and domain weights."""
    teacher, problems = cfg.get("teacher") or {}, []
    if teacher.get("source") == "hf":
        if not teacher.get("path"):
            problems.append("teacher.path: required when teacher.source is hf")
        elif isinstance(teacher["path"], str):
            problems.append(path_problem("teacher.path", teacher["path"]))
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


def gguf_problems(cfg: dict) -> list[str]:
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


def architecture_problems(cfg: dict) -> list[str]:
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
    controls = (cfg.get("decode") or {}).get("controls") or []
    for control in (c for c in names(runner="loop", model="teacher") if c in controls):
        problems.append(f"decode.controls: the {control} runs the Orthrus loop on the teacher: it {why}")
    bench = cfg.get("benchmarks") or {}
    if bench.get("enabled", True) and bench.get("ar_baseline") != "hf":
        problems.append(
            f"benchmarks.ar_baseline: {bench.get('ar_baseline')!r} runs the teacher through the Orthrus "
            f"package's AR loop: it {why}; set it to hf"
        )
    return problems


def draft_problems(cfg: dict, props: dict) -> list[str]:
    """The assisted decoder's draft (teacher.draft): required for it, and able to share the
    teacher's tokenizer (a tiny draft is trained with it; a hub draft cannot have the tiny
    teacher's, which is trained on the tiny world)."""
    teacher = cfg.get("teacher", {})
    draft = teacher.get("draft")
    if not any(d in DECODER and DECODER[d].needs_draft for d in (cfg.get("decode") or {}).get("decoders", [])):
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
            problems.append(path_problem("teacher.draft.path", draft["path"]))
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
