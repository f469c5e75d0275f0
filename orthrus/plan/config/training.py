"""The whole study's rules about its training runs (the root model's validator calls them): the corpus
scatter against the distillation prompts, and each variant's seed, mask token, global batch and warm-up
against what the rest of the config says (the global seed, the teacher's vocabulary, the GPUs per job,
the prompts); a variant's own rules are its section's (orthrus/distill/settings.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orthrus.distill.settings import Settings
from orthrus.world.settings import SEED_MAX


def distill_prompt_count(cfg) -> int | None:
    """At most this many distillation prompts (each at most one corpus sequence): prompts.distill_n,
    and with prompts.source hf no more than its distill specs take (`n`, default 1000 each); with
    corpus.source hf the split's expected_rows, where given; None where unknown."""
    corpus, prompts = cfg.corpus, cfg.prompts
    if corpus.source == "hf":
        return corpus.expected_rows
    n = prompts.distill_n
    if prompts.source == "hf":
        specs = sum(spec.n or 1000 for spec in prompts.distill or [])
        n = n if prompts.eval_file and prompts.eval_file_split else min(n, specs)
    return n


def vocabulary(cfg) -> tuple[int, str] | None:
    """(an upper bound on the teacher's vocabulary, where it comes from), where it is known before
    any job: a tiny teacher's (its tokenizer's size rounded up past a multiple of 64), the shipped
    subject's or a local hf teacher's config.json; None for a hub teacher."""
    teacher = cfg.teacher
    if teacher.source == "tiny":
        v = teacher.tiny.vocab_size
        return (v // 64 + 1) * 64, f"teacher.tiny.vocab_size {v}"
    if teacher.source == "shipped":
        from orthrus.world import subject

        path = subject.model_dir("teacher")
    elif teacher.source == "hf" and teacher.path:
        path = Path(os.path.expanduser(teacher.path))
    else:
        return None
    try:
        n = json.loads((path / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (n, f"{path}/config.json") if isinstance(n, int) else None


def scatter_problems(cfg, scatter: dict) -> list[str]:
    """`--set-scatter` counts (1 to 4096, corpus and decode only), and no more corpus shards than
    distillation prompts (empty shards)."""
    problems = []
    for key, n in scatter.items():
        if key not in ("corpus", "decode"):
            problems.append(f"--set-scatter {key}={n}: no such scatter (corpus, decode)")
        elif not (isinstance(n, int) and 1 <= n <= 4096):
            problems.append(f"--set-scatter {key}={n}: a scatter count is 1 to 4096 jobs ({key}.shards)")
    n_prompts = distill_prompt_count(cfg)
    shards = scatter.get("corpus", cfg.corpus.shards)
    where = "--set-scatter corpus" if "corpus" in scatter else "corpus.shards"
    if n_prompts is not None and isinstance(shards, int) and shards > n_prompts:
        problems.append(
            f"{where}: {shards} shards for at most {n_prompts} distillation prompts would leave shards "
            f"empty; use at most {n_prompts}"
        )
    return problems


def variant_problems(cfg) -> list[str]:
    """Each variant against the study: its seed plus the global one within torch's range, its mask
    token inside a known vocabulary, a global batch (batch_size x grad_accum x GPUs) no larger than the
    corpus, a warm-up below the run's optimizer steps where max_steps leaves them to the corpus."""
    problems, n_prompts = [], distill_prompt_count(cfg)
    vocab = vocabulary(cfg) if cfg.models else None
    world = max(1, cfg.resources.train.gpus)
    for name, s in cfg.models.items():
        s, key = s or Settings(), f"models.{name}"
        if s.mask_token_id is not None and vocab is not None and s.mask_token_id >= vocab[0]:
            problems.append(
                f"{key}.mask_token_id: {s.mask_token_id} is outside the teacher's vocabulary (below "
                f"{vocab[0]}, {vocab[1]}); use an id of the vocabulary, or null for a new mask token"
            )
        if cfg.seed + s.seed > SEED_MAX:
            problems.append(
                f"{key}.seed: {s.seed} plus the global seed {cfg.seed} exceeds 2^64 - 1, the largest seed "
                "torch takes; lower either"
            )
        warm, G = s.warmup_steps, s.batch_size * s.grad_accum * world
        if s.max_steps is not None or n_prompts is None:
            continue
        per_epoch = n_prompts // G
        if per_epoch == 0:
            problems.append(
                f"{key}.batch_size: a global batch of {G} sequences (batch_size {s.batch_size} x grad_accum "
                f"{s.grad_accum} x {world} GPU(s)) exceeds the at most {n_prompts} corpus sequences: not one "
                "optimizer step; lower it"
            )
        elif warm and warm >= per_epoch * s.epochs:
            problems.append(
                f"{key}.warmup_steps: {warm} is not below the at most {per_epoch * s.epochs} optimizer steps of the "
                f"run ({s.epochs} epoch(s) x {n_prompts} distillation prompts // global batch {G}): the learning "
                "rate would never leave warm-up; lower it or set max_steps"
            )
    return problems
