"""The sampling audit's own settings: `TwoSample` (sampling.two_sample, which `orthrus export-prompts
--sampling` reads too) and `SampledAudit`, the keys of `sampling` that `orthrus sampling` reads. The study's
`sampling` section (orthrus/plan/config/side_runs.py) is this one with what the plan decides: whether it
runs, on which model and cells, and the engines' sampled files."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from orthrus.config import Int, Num, Section, opt, unique
from orthrus.contracts import PRECISIONS

Temperature = Annotated[Num, Field(gt=0, le=100)]
TopP = Annotated[Num, Field(gt=0, le=1)]


class TwoSample(Section):
    """The empirical two-sample test, in one precision and the first attention kernel."""

    enabled: bool = Field(True, description="Run it.")
    precision: Literal[PRECISIONS] = Field("fp32", description="Its precision.")
    temperature: Temperature = Field(0.5, description="Its temperature (not 1, where the planted bug is none).")
    top_p: TopP | None = Field(None, description="Its top-p (null is none).")
    top_k: opt(Int, ge=1) = Field(None, description="Its top-k (null is none).")
    n_samples: Int = Field(
        300,
        ge=10,
        le=1000000,
        description="Samples per arm and prompt; the least, where n_samples_max lets the plan raise it.",
    )
    n_samples_max: opt(Int, ge=10, le=1000000) = Field(
        None,
        description="The most samples per arm and prompt the plan may take (null: n_samples, fixed); each prompt's N "
        "is planned to reject the planted control with probability `power` (orthrus/audit/known_p.py).",
    )
    power: Num = Field(
        0.95,
        gt=0.5,
        lt=1,
        description="Probability of rejecting the planted control on each prompt that N is planned for.",
    )
    plan_trajectories: Int = Field(
        8, ge=1, le=1000, description="Reference trajectories the planted control's shift is averaged over, per prompt."
    )
    m: Int = Field(6, ge=2, le=1000, description="Tokens per sample (the prefix tested).")
    prompts_per_domain: Int = Field(1, ge=1, le=1000, description="Prompts per domain.")
    domains: unique(str) | None = Field(None, description="The domains tested (null is every domain).")
    alpha: Num = Field(
        0.05, gt=0, lt=0.5, description="Family-wise level of Holm's correction over each arm's prompts."
    )


class SampledAudit(Section):
    """The sampled loop's analytic total variation against single-step sampling, and the two-sample test."""

    seed: Int = Field(
        0,
        ge=0,
        description="Seed of the reference trajectories and of the samples (each prompt and arm its own stream).",
    )
    temperatures: unique(Temperature, min_length=1) = Field([0.7, 1.0], description="Temperatures of the analytic TV.")
    top_p: unique(TopP | None, min_length=1) = Field(
        [None, 0.9], description="Top-p settings of the analytic TV (null is none), each at every temperature."
    )
    prompts_per_domain: Int = Field(
        1,
        ge=1,
        le=1000,
        description="Prompts per domain of the analytic TV (the first of each domain), one "
        "reference trajectory each per setting.",
    )
    max_new_tokens: Int = Field(
        128,
        ge=2,
        le=100000,
        description="Length of each reference trajectory; the tables' bound_at_length scales "
        "the mean TV to decode.max_new_tokens.",
    )
    two_sample: TwoSample = Field(TwoSample(), description=TwoSample.__doc__)
