"""`decode`: the trajectory study's grid, its decoders and controls, narrower grids, engines'
trajectories (external ones and those the workflow runs); the decoding options' defaults are
orthrus/options.py `DecodeOptions`'s, the controls' sizes its NOISE_BATCH_SIZE and ORACLE_BLOCK_SIZE."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.config import Int, Message, Name, Num, Section, check, matching, unique
from orthrus.contracts import ATTENTIONS, CONTROLS, PRECISIONS
from orthrus.decoders import names as decoder_names
from orthrus.options import EOS_POLICIES, LAST_BLOCKS, NOISE_BATCH_SIZE, ORACLE_BLOCK_SIZE, PREFILL_LOGITS
from orthrus.options import DecodeOptions as O
from orthrus.plan.config.engines import EngineRun, External

Precision, Attention = Literal[PRECISIONS], Literal[ATTENTIONS]
Count = Annotated[Int, Field(ge=1)]
Device = matching("^(cpu|cuda(:[0-9]+)?|mps)$", "cpu, cuda, cuda:N or mps")


class Grid(Section):
    SPARSE = True
    precisions: unique(Precision, min_length=1) | None = None
    attentions: unique(Attention, min_length=1) | None = None
    prompts_per_domain: Count | dict[Precision, Count] = Field(
        None,
        description="Decode only the first N evaluation prompts of each domain in these cells (left out: all of"
        " them); their tables rest on those prompts. A mapping {precision: N} sets N per precision (a precision left"
        " out: all prompts), e.g. fewer in fp32, whose claim needs no divergences to count.",
    )


class Decode(Section):
    """The trajectory study's decoding grid (batch size 1, greedy)."""

    precisions: unique(Precision, min_length=1) = Field(list(PRECISIONS), description="Precisions to decode at.")
    attentions: unique(Attention, min_length=1) = Field(
        ["eager", "sdpa"], description="Attention implementations to decode with."
    )
    max_new_tokens: Int = Field(O.max_new_tokens, ge=1, le=32768, description="Tokens per trajectory (paper 128).")
    shards: Int = Field(
        1,
        ge=1,
        le=4096,
        description="Jobs per (model, decoder, precision, attention); override with --set-scatter decode=N.",
    )
    own_ar_view: bool = Field(
        True, description="Also decode each Orthrus model's own AR view with our loop (a second reference)."
    )
    decoders: unique(Literal[decoder_names(role="speculative", runner="generate")]) = Field(
        [],
        description="transformers' own greedy speculative decoders, audited beside Orthrus on the teacher: "
        "`assisted` (generate with assistant_model, the draft of teacher.draft) and `prompt-lookup` (generate with "
        "prompt_lookup_num_tokens); each runs over the same precision x attention grid and prompts as Orthrus (unless"
        " decode.grids narrows either), compared with the ar-ref reference.",
    )
    verify_guard: Num = Field(
        O.verify_guard,
        ge=0,
        le=1000,
        description="The guarded verify of our loop (greedy): a consensus step whose "
        "verify row (an accepted draft's or the correction's) has an AR top-1/top-2 margin below this ends there, and"
        " a single-token AR forward decides the next token; 0 is the plain loop. docs/SPEED.md and the frontier "
        "(results/tables/exactness_cost.csv) measure what it restores.",
    )
    controls: unique(Literal[CONTROLS]) = Field(
        [],
        description="The audit's controls, each compared with the ar-ref reference like a decoder (decode.grids "
        "can narrow each): `oracle`, the Orthrus consensus loop on the teacher whose drafts are the reference's own "
        "next tokens, so that a divergence is the verify shape's numerics alone (blocks of decode.oracle_block_size);"
        " `ar-batched`, the reference through transformers' generate in left-padded batches of "
        "decode.noise_batch_size prompts, the divergence a serving engine shows without speculation; "
        "`orthrus-lossy`, a planted bug the audit must flag (each Orthrus model's loop accepting a draft token that "
        "is among the AR view's top 2).",
    )
    oracle_block_size: Int = Field(
        ORACLE_BLOCK_SIZE,
        ge=2,
        le=64,
        description="Tokens per verify block of the oracle control (the Orthrus models' K).",
    )
    noise_batch_size: Int = Field(
        NOISE_BATCH_SIZE,
        ge=2,
        le=1024,
        description="Prompts per left-padded generate() call of the ar-batched "
        "control (the reference's noise floor in batches).",
    )
    grids: dict[Name, Grid] = Field(
        {},
        description="Narrower grids, {name: {precisions, attentions, prompts_per_domain}}, each a subset of "
        "decode.precisions / decode.attentions (a key left out keeps the full list) and of the evaluation prompts, to"
        " spend a time budget where divergence happens. A name is a decoder of decode.decoders (its runs on the "
        "teacher) or an Orthrus model of models / external_models (its Orthrus loop, its forensics and, with "
        "decode.own_ar_view, its own AR view); anything else is an error. Whatever is not named keeps the full grid,"
        " and so does the ar-ref reference (every cell's reference), on the most prompts per domain that a cell of "
        "its precision decodes (all where an engine's file is at that precision). The tables and figures show only "
        "the cells a model ran. The separate TPF run (tpf.precisions / tpf.attentions) and the benchmarks "
        "(benchmarks.precisions / benchmarks.attention) keep their own settings for every model.",
    )
    external: dict[Name, External] = Field(
        {},
        description="Trajectories decoded by engines outside this package (vLLM, SGLang, TensorRT-LLM, "
        "llama.cpp, a research loop), each audited as a decoder of the study: {name: {path, reference, precision, "
        "attention}}. Export the prompts (`snakemake results/export/prompts.jsonl`, or `orthrus export-prompts`), "
        "run the engine (docs/EXTERNAL.md), name its file here: `orthrus ingest` checks it against the prompt set and"
        " the teacher's tokenizer and writes it as decoder `external`, model `name`, so every table, figure, the "
        "pairwise matrix, tokens per forward (where the file gives counts), the perplexity analysis and the forensics"
        " at the first divergence (scored by the teacher) include it. Names are unique across the teacher, models, "
        "external_models and these. The study's claims stay about its own decoders.",
    )
    engines: dict[Name, EngineRun] = Field(
        {},
        description="Engines the workflow runs itself (orthrus/engines/runner.py, docs/ENGINES.md): {name: "
        "{engine, speculative, k, precision, attention, reference}}. A vllm entry runs the project's vLLM recipe "
        "(orthrus/engines/vllm_recipe.py) in the engine's own environment (engines.vllm_python) on the exported "
        "prompts, one process per precision; a llamacpp entry starts llama.cpp's server on the loopback for its run "
        "(orthrus/engines/llamacpp.py). Each file joins the study as a decode.external entry of that name "
        "(results/engine/NAME.jsonl): ingest, every table, tokens per forward from the engine's accepted counts, and "
        "verdicts from its own top-2 log-probabilities. Names are unique across the teacher, models, external_models,"
        " decode.external and these.",
    )
    prompt_lookup_tokens: Int = Field(
        O.prompt_lookup_tokens,
        ge=1,
        description="prompt_lookup_num_tokens of the prompt-lookup decoder (tokens proposed per step).",
    )
    device: Device = Field(
        "cpu",
        description="torch device of every stage that runs a model: a tiny teacher's and draft's training, the"
        " corpus, the distillation, decoding, perplexity, forensics, the frontier, sampling and benchmarks (cpu, cuda,"
        " cuda:N, mps). `cpu` keeps them all on the CPU, also on a GPU machine; the shipped tiny teacher is refused "
        "on anything else (configs/gpu.yaml is the GPU study).",
    )
    max_error_share: Num = Field(
        0,
        ge=0,
        le=1,
        description="A decoding job fails, naming its first errors, when more than this share of its "
        "prompts end in an error row (a prompt too long for the model, an exception); 0 = any error fails.",
    )
    message: Message = Field(
        O.message,
        description="How prompts become chat messages: `empty` system message (the follow-up paper's "
        "trajectory study), `none` (user only) or `system:<text>`; recorded in every row's env.",
    )
    eos: Literal[EOS_POLICIES] = Field(
        O.eos,
        description="Ids that end our loops' trajectories: every generation_config EOS id, or "
        "config.eos_token_id only (the released Orthrus loop). ar-ref always stops as transformers' generate does.",
    )
    last_block: Literal[LAST_BLOCKS] = Field(
        O.last_block,
        description="`full`: every diffusion block has K tokens; `shorten`: the last blocks have "
        "min(K, remaining + 1), as the released loop.",
    )
    prefill_logits: Literal[PREFILL_LOGITS] = Field(
        O.prefill_logits, description="Prompt positions whose logits the prefill computes (the released loop: all)."
    )
    deterministic: bool = Field(
        O.deterministic,
        description="torch deterministic algorithms and cuDNN determinism on; false leaves torch's "
        "defaults, as the authors did.",
    )

    @model_validator(mode="after")
    def _grids(self):
        """Each narrower grid inside the decode grid (the ar-ref reference runs only there), its
        per-precision prompt counts for precisions its cells run."""
        lines = []
        for key, grid in self.grids.items():
            for sub in ("precisions", "attentions"):
                extra = [v for v in getattr(grid, sub) or [] if v not in getattr(self, sub)]
                if extra:
                    lines.append(
                        (
                            f"grids.{key}.{sub}",
                            f"{extra} not in decode.{sub} {getattr(self, sub)} (the ar-ref reference runs only there)",
                        )
                    )
            per, runs = grid.prompts_per_domain, grid.precisions or self.precisions
            idle = [p for p in per if p not in runs] if isinstance(per, dict) else []
            if idle:
                lines.append(
                    (
                        f"grids.{key}.prompts_per_domain",
                        f"{idle} not among the precisions these cells run {runs}, so the setting would decode nothing",
                    )
                )
        check(lines)
        return self

    @model_validator(mode="after")
    def _external(self):
        """decode.external: a reference that is another entry (with none of its own), a file that exists
        unless a stand-in writes it, a cell inside the decode grid. A cell left to the file's env is
        checked when the workflow reads it (orthrus.engines.ingest.cell)."""
        lines, entries = [], self.external
        for name, e in entries.items():
            key, ref = f"external.{name}", e.reference
            if ref == name:
                lines.append((f"{key}.reference", "the entry itself; name another entry, the engine's own plain run"))
            elif ref is not None and ref not in entries:
                lines.append((f"{key}.reference", f"{ref!r} is not an entry of decode.external {sorted(entries)}"))
            elif ref is not None and entries[ref].reference is not None:
                lines.append(
                    (
                        f"{key}.reference",
                        f"{ref!r} has a reference of its own (decode.external.{ref}."
                        "reference); a reference is a plain run, compared with the in-process ar-ref",
                    )
                )
            if e.stand_in:
                lines += [
                    (f"{key}.{k}", f"required with decode.{key}.stand_in (the stand-in runs at it)")
                    for k in ("precision", "attention")
                    if not getattr(e, k)
                ]
            elif not Path(os.path.expanduser(e.path)).is_file():
                lines.append(
                    (f"{key}.path", f"no such file: {e.path!r} (the engine's trajectory file, docs/EXTERNAL.md)")
                )
            for k, grid in (("precision", self.precisions), ("attention", self.attentions)):
                if getattr(e, k) and getattr(e, k) not in grid:
                    lines.append(
                        (
                            f"{key}.{k}",
                            f"{getattr(e, k)!r} not in decode.{k}s {grid} (the ar-ref reference"
                            " it is compared with runs only there)",
                        )
                    )
        check(lines)
        return self
