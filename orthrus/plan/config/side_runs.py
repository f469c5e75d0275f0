"""`tpf`, `frontier`, `sampling`: the runs beside the trajectory study; the frontier's defaults are
orthrus/decode/frontier.py DEFAULTS and BASE."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.audit.settings import SampledAudit
from orthrus.config import OMIT, Int, Message, Name, Num, Section, check, unique
from orthrus.decode.frontier import BASE
from orthrus.decode.frontier import DEFAULTS as FRONTIER
from orthrus.options import EOS_POLICIES, LAST_BLOCKS, PREFILL_LOGITS
from orthrus.plan.config.decode import Attention, Precision
from orthrus.plan.config.engines import SampledEngine


class Tpf(Section):
    """A separate tokens-per-forward run for Table 2 at its own settings (the authors': 256 new tokens, a
    user-only message, bf16); `tpf_by_domain.csv` reports it beside the study's rows. The decoding options
    not set here come from `decode`."""

    enabled: bool = Field(False, description="Run it (for every Orthrus model).")
    max_new_tokens: Int = Field(256, ge=1, le=32768, description="Tokens per prompt.")
    message: Message = Field("none", description="Message format (see decode.message).")
    precisions: unique(Precision, min_length=1) = Field(["bf16"], description="Precisions of the run.")
    attentions: unique(Attention, min_length=1) = Field(
        ["eager"],
        description="Attention implementations of the run (the authors' speed script used flash_attention_2).",
    )
    eos: Annotated[Literal[EOS_POLICIES], OMIT] = Field(None, description="As decode.eos (default there).")
    last_block: Annotated[Literal[LAST_BLOCKS], OMIT] = Field(None, description="As decode.last_block.")
    prefill_logits: Annotated[Literal[PREFILL_LOGITS], OMIT] = Field(None, description="As decode.prefill_logits.")
    deterministic: Annotated[bool, OMIT] = Field(None, description="As decode.deterministic.")


class Base(Section):
    """The cell the guards run on and the times are relative to (the one where bf16 diverges on CPU)."""

    precision: Precision = Field(BASE["precision"], description="Its precision.")
    attention: Attention = Field(BASE["attention"], description="Its attention kernel.")


class Frontier(Section):
    """The price of exactness (`orthrus frontier`, results/tables/exactness_cost.csv): one Orthrus model's loop on a
    few prompts per domain in every setting that could restore the AR trajectory, each compared with its own AR
    view and timed. The other decoding options come from `decode`."""

    enabled: bool = Field(True, description="Run it (needs an Orthrus model).")
    model: str | None = Field(
        None,
        description="The Orthrus model it measures (a key of models or external_models); null is the first "
        "trained one.",
    )
    prompts_per_domain: Int = Field(
        FRONTIER["prompts_per_domain"],
        ge=1,
        le=1000,
        description="Prompts per domain (the first of each domain in the evaluation set), the same in every setting.",
    )
    precisions: unique(Precision, min_length=1) = Field(
        FRONTIER["precisions"], description="Precisions measured (each with every attention kernel)."
    )
    attentions: unique(Attention, min_length=1) = Field(
        FRONTIER["attentions"], description="Attention kernels measured."
    )
    guards: unique(Annotated[Num, Field(gt=0, le=1000)]) = Field(
        FRONTIER["guards"],
        description="TAU values of the guarded verify (decode.verify_guard) measured on the base cell.",
    )
    base: Base = Field(Base(), description=Base.__doc__)


class Sampling(SampledAudit):
    """Lossless in distribution (`orthrus sampling`, docs/SAMPLING.md): one Orthrus model's sampled loop, the
    analytic total variation against single-step sampling and an empirical two-sample test beside a planted biased
    sampler. The other decoding options come from `decode`."""

    enabled: bool = Field(False, description="Run it (needs an Orthrus model).")
    model: str | None = Field(
        None, description="The Orthrus model it measures (a key of models or external_models); null is the first one."
    )
    precisions: unique(Precision) | None = Field(
        None, description="Precisions of the analytic TV; null is decode.precisions."
    )
    attentions: unique(Attention) | None = Field(
        None, description="Attention kernels of the analytic TV; null is decode.attentions."
    )
    engines: dict[Name, SampledEngine] = Field(
        {},
        description="Engines' sampled files, a speculative one tested against the plain one its `reference` names "
        "(docs/SAMPLING.md); runs whether or not `enabled` is.",
    )

    @model_validator(mode="after")
    def _rules(self):
        """The planted bug needs a temperature other than 1; the engines' pairs: a reference that is another entry
        and only a reference, the two-sample test on, a
        seed only where the workflow samples, an engine's settings only with `engine`."""
        lines = []
        if self.enabled and self.two_sample.enabled and float(self.two_sample.temperature) == 1.0:
            lines.append(
                (
                    "two_sample.temperature",
                    "the planted control's bug (q at temperature 1) is no bug at temperature 1; choose another",
                )
            )
        engines = self.engines
        if engines and not self.two_sample.enabled:
            lines.append(("engines", "the engines' test takes sampling.two_sample's settings, and it is disabled"))
        if engines and not any(e.reference for e in engines.values()):
            lines.append(
                (
                    "engines",
                    "no entry has a reference, so nothing is tested: give the speculative run "
                    "`reference: NAME`, its plain run's entry",
                )
            )
        for n, e in engines.items():
            ref, key = e.reference, f"engines.{n}"
            if ref is not None and ref not in engines:
                lines.append((f"{key}.reference", f"{ref!r} is not an entry of sampling.engines {list(engines)}"))
            elif ref is not None and (ref == n or engines[ref].reference):
                lines.append(
                    (f"{key}.reference", f"{ref!r} must be a plain run, an entry with no reference of its own")
                )
            if e.seed is not None and not (e.stand_in or e.engine):
                lines.append(
                    (f"{key}.seed", "only a stand_in or an engine samples with it; a given file states its own")
                )
            if e.stand_in and e.engine:
                lines.append((key, "stand_in and engine both write its file; give one"))
            if not e.engine:
                lines += [
                    (f"{key}.{k}", "set without engine (only the workflow's engine run takes it)")
                    for k in ("speculative", "k", "patches", "gguf", "draft")
                    if k in e.model_fields_set and getattr(e, k) not in (None, [], "none")
                ]
        check(lines)
        return self
