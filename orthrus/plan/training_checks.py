"""Cross-key rules of the training settings (models.*, the corpus scatter and the tiny teachers'
warm-up): settings that would make training meaningless, each named by its key, before any job."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orthrus.distill.settings import SEED_MAX


def warmup_problem(key: str, s: dict) -> str | None:
    """The tiny teacher's (or draft's) warm-up against its steps."""
    if s["warmup_steps"] >= s["steps"] and s["warmup_steps"] > 0:
        return (
            f"{key}.warmup_steps: {s['warmup_steps']} is not below {key}.steps ({s['steps']}): the learning "
            "rate would never leave warm-up; lower it"
        )
    return None


def distill_prompt_count(cfg: dict) -> int | None:
    """At most this many distillation prompts (each at most one corpus sequence): prompts.distill_n,
    and with prompts.source hf no more than its distill specs take (`n`, default 1000 each); with
    corpus.source hf the split's expected_rows, where given; None where unknown."""
    corpus, prompts = cfg.get("corpus") or {}, cfg.get("prompts") or {}
    if corpus.get("source", "generate") == "hf":
        return corpus.get("expected_rows")
    n = prompts.get("distill_n", 1000)
    if prompts.get("source") == "hf":
        specs = sum(int(spec.get("n", 1000)) for spec in prompts.get("distill") or [])
        n = n if prompts.get("eval_file") and prompts.get("eval_file_split") else min(n, specs)
    return n


def vocabulary(cfg: dict, props: dict) -> tuple[int, str] | None:
    """(an upper bound on the teacher's vocabulary, where it comes from), where it is known before
    any job: a tiny teacher's (its tokenizer's size rounded up past a multiple of 64), the shipped
    subject's or a local hf teacher's config.json; None for a hub teacher."""
    teacher = cfg.get("teacher") or {}
    source = teacher.get("source")
    if source == "tiny":
        tiny = {**code_defaults(props["teacher"]["properties"]["tiny"]), **(teacher.get("tiny") or {})}
        return (tiny["vocab_size"] // 64 + 1) * 64, f"teacher.tiny.vocab_size {tiny['vocab_size']}"
    if source == "shipped":
        from orthrus.world import subject

        path = subject.model_dir("teacher")
    elif source == "hf" and teacher.get("path"):
        path = Path(os.path.expanduser(str(teacher["path"])))
    else:
        return None
    try:
        n = json.loads((path / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (n, f"{path}/config.json") if isinstance(n, int) else None


def training_problems(cfg: dict, props: dict, scatter: dict) -> list[str]:
    """Settings of the variants (models.*) and the corpus scatter that would make training
    meaningless, each named by its key: offset weights of the wrong length or all 0, a block as long
    as a whole sequence, a warm-up that outlasts the run, a global batch larger than the corpus, a
    mask token outside the teacher's vocabulary, a seed beyond torch's range, more corpus shards
    than distillation prompts (empty shards), a `--set-scatter` count outside 1..4096."""
    problems = []
    for key, n in scatter.items():
        if key not in ("corpus", "decode"):
            problems.append(f"--set-scatter {key}={n}: no such scatter (corpus, decode)")
        elif not (isinstance(n, int) and 1 <= n <= 4096):
            problems.append(f"--set-scatter {key}={n}: a scatter count is 1 to 4096 jobs ({key}.shards)")
    n_prompts = distill_prompt_count(cfg)
    shards = scatter.get("corpus", (cfg.get("corpus") or {}).get("shards", 1))
    where = "--set-scatter corpus" if "corpus" in scatter else "corpus.shards"
    if n_prompts is not None and isinstance(shards, int) and shards > n_prompts:
        problems.append(
            f"{where}: {shards} shards for at most {n_prompts} distillation prompts would leave shards "
            f"empty; use at most {n_prompts}"
        )
    vocab = vocabulary(cfg, props) if cfg.get("models") else None
    world = max(1, ((cfg.get("resources") or {}).get("train") or {}).get("gpus", 0))
    seed = cfg.get("seed", 0)
    defaults = code_defaults(props["models"]["additionalProperties"])
    for name, s in (cfg.get("models") or {}).items():
        s, key = {**defaults, **(s or {})}, f"models.{name}"
        w, k = s["offset_weights"], s["block_size"]
        if w is not None and len(w) not in (k - 1, k):
            problems.append(
                f"{key}.offset_weights: needs block_size-1 = {k - 1} or block_size = {k} values, got {len(w)}"
            )
        elif w is not None and not any(x > 0 for x in w[:k]):
            problems.append(
                f"{key}.offset_weights: every weight is 0: no block slot has a loss, nothing would be trained"
            )
        if k >= s["max_len"]:
            problems.append(
                f"{key}.block_size: {k} is not below {key}.max_len ({s['max_len']}): a training sequence "
                "holds a prompt token and a whole block only when block_size < max_len"
            )
        if s["mask_token_id"] is not None and vocab is not None and s["mask_token_id"] >= vocab[0]:
            problems.append(
                f"{key}.mask_token_id: {s['mask_token_id']} is outside the teacher's vocabulary (below "
                f"{vocab[0]}, {vocab[1]}); use an id of the vocabulary, or null for a new mask token"
            )
        if seed + s["seed"] > SEED_MAX:
            problems.append(
                f"{key}.seed: {s['seed']} plus the global seed {seed} exceeds 2^64 - 1, the largest seed "
                "torch takes; lower either"
            )
        warm, G = s["warmup_steps"], s["batch_size"] * s["grad_accum"] * world
        if s["max_steps"] is not None:
            if warm and warm >= s["max_steps"]:
                problems.append(
                    f"{key}.warmup_steps: {warm} is not below {key}.max_steps ({s['max_steps']}): the "
                    "learning rate would never leave warm-up; lower it"
                )
        elif n_prompts is not None:
            per_epoch = n_prompts // G
            if per_epoch == 0:
                problems.append(
                    f"{key}.batch_size: a global batch of {G} sequences (batch_size {s['batch_size']} x "
                    f"grad_accum {s['grad_accum']} x {world} GPU(s)) exceeds the at most {n_prompts} "
                    "corpus sequences: not one optimizer step; lower it"
                )
            elif warm and warm >= per_epoch * s["epochs"]:
                problems.append(
                    f"{key}.warmup_steps: {warm} is not below the at most {per_epoch * s['epochs']} optimizer "
                    f"steps of the run ({s['epochs']} epoch(s) x {n_prompts} distillation prompts // global "
                    f"batch {G}): the learning rate would never leave warm-up; lower it or set max_steps"
                )
    return problems


def code_defaults(schema: dict) -> dict:
    """{key: default} of an object whose defaults the command applies (x-fill-defaults: false)."""
    return {k: v["default"] for k, v in schema.get("properties", {}).items() if "default" in v}
