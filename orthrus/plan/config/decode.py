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
        description="Decode only the first N prompts of each domain in these cells (left out: all), or {precision: N}.",
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
        description="transformers' own greedy speculative decoders audited beside Orthrus on the teacher: `assisted` "
        "(its draft is teacher.draft) and `prompt-lookup`.",
    )
    verify_guard: Num = Field(
        O.verify_guard,
        ge=0,
        le=1000,
        description="TAU of our greedy loop's guarded verify: a verify row whose AR top-1/top-2 margin is below it "
        "ends the step, and an AR forward decides the next token; 0 is the plain loop (docs/SPEED.md).",
    )
    controls: unique(Literal[CONTROLS]) = Field(
        [],
        description="The audit's controls, compared with ar-ref like a decoder (docs/AUDIT.md): `oracle` (the loop "
        "drafting the reference's own tokens), `ar-batched` (generate in left-padded batches), `orthrus-lossy` (a "
        "planted bug the audit must flag).",
    )
    oracle_block_size: Int = Field(ORACLE_BLOCK_SIZE, ge=2, le=64, description="Tokens per verify block of the oracle.")
    noise_batch_size: Int = Field(NOISE_BATCH_SIZE, ge=2, le=1024, description="Prompts per batch of ar-batched.")
    grids: dict[Name, Grid] = Field(
        {},
        description="Narrower grids, each inside decode.precisions / decode.attentions and the prompts, named by a "
        "decoder of decode.decoders or an Orthrus model; the rest, and the ar-ref reference, keep the full grid.",
    )
    external: dict[Name, External] = Field(
        {},
        description="Trajectory files of engines outside this package, each audited as a decoder of the study "
        "(docs/EXTERNAL.md); names are unique across the study's models.",
    )
    engines: dict[Name, EngineRun] = Field(
        {},
        description="Engines the workflow runs itself, each file joining decode.external under its name "
        "(docs/ENGINES.md).",
    )
    prompt_lookup_tokens: Int = Field(
        O.prompt_lookup_tokens, ge=1, description="prompt_lookup_num_tokens of the prompt-lookup decoder."
    )
    device: Device = Field(
        "cpu",
        description="torch device of every stage that runs a model; the shipped tiny teacher is refused off the CPU "
        "(configs/gpu.yaml is the GPU study).",
    )
    max_error_share: Num = Field(
        0,
        ge=0,
        le=1,
        description="A decoding job fails when more than this share of its prompts are error rows (0: any error).",
    )
    message: Message = Field(
        O.message,
        description="How prompts become chat messages: an `empty` system message, `none` (user only) or "
        "`system:<text>`.",
    )
    eos: Literal[EOS_POLICIES] = Field(
        O.eos,
        description="Ids that end our loops: every generation_config EOS id, or config.eos_token_id only (the "
        "released loop).",
    )
    last_block: Literal[LAST_BLOCKS] = Field(
        O.last_block,
        description="`full`: every block K tokens; `shorten`: min(K, remaining + 1), as the released loop.",
    )
    prefill_logits: Literal[PREFILL_LOGITS] = Field(
        O.prefill_logits, description="Prompt positions whose logits the prefill computes (the released loop: all)."
    )
    deterministic: bool = Field(O.deterministic, description="torch deterministic algorithms and cuDNN determinism.")

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
