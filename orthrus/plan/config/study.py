"""The study's config: one model, a section per part (orthrus/plan/config/*.py), and the rules that only
the whole study shows (names unique across its models, what the decoders, grids, side runs, revisions,
kernels and device ask of the rest); each problem one line naming its key."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, model_validator

from orthrus.config import Int, Name, Section, check, matching
from orthrus.distill.settings import Settings
from orthrus.plan.config.analysis import Analysis, Benchmarks, Resources
from orthrus.plan.config.data import Corpus, Prompts
from orthrus.plan.config.decode import Decode
from orthrus.plan.config.engines import Engines
from orthrus.plan.config.machine import Machine, machine_problems
from orthrus.plan.config.rules import name_problems, study_problems
from orthrus.plan.config.side_runs import Frontier, Sampling, Tpf
from orthrus.plan.config.teacher import Teacher
from orthrus.plan.config.training import scatter_problems, variant_problems
from orthrus.world.settings import SEED_MAX

HubId = matching("^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*(?![\\s\\S])", "a hub id owner/name")
Revision = matching("^[A-Za-z0-9][A-Za-z0-9_./-]*(?![\\s\\S])", "a commit, tag or branch name")


class StudyConfig(Section):
    """Configuration of the Orthrus exactness study. `config.yaml` is the embedded default (a tiny world trained
    on CPU); `configs/paper.yaml` is the paper scale. Unknown keys are errors."""

    seed: Int = Field(
        0,
        ge=0,
        le=SEED_MAX,
        description="Global seed: every stage that draws anything derives its own from it (prompts, distillation, "
        "benchmark documents, a tiny teacher and draft); decoding is greedy. `--config seed=N` is another "
        "realisation of the study.",
    )
    threads: Int = Field(
        1, ge=1, description="torch threads per job (1 is fastest for the tiny models; jobs run in parallel instead)."
    )
    teacher: Teacher = Field(description=Teacher.__doc__)
    prompts: Prompts = Field(description=Prompts.__doc__)
    corpus: Corpus = Field(description=Corpus.__doc__)
    models: dict[Name, Settings | None] = Field(
        {},
        description="Orthrus variants to train: {name: settings of `orthrus train`}; a setting left out takes its"
        " default from orthrus/distill/settings.py (shown here). Names are unique across the teacher, the variants "
        "and external_models.",
    )
    revisions: dict[HubId, Revision] = Field(
        {},
        description="{hub id: commit, tag or branch}: pins a hub model or corpus this config loads to a revision "
        "wherever it is loaded; every decoding row records the commit it read.",
    )
    external_models: dict[Name, Annotated[str, Field(min_length=1)]] = Field(
        {},
        description="Orthrus checkpoints in the released format to study beside the trained ones: {name: hub id "
        "or directory}. A local directory must exist when the workflow is parsed.",
    )
    decode: Decode = Field(description=Decode.__doc__)
    engines: Engines = Field(Engines(), description=Engines.__doc__)
    tpf: Tpf = Field(Tpf(), description=Tpf.__doc__)
    analysis: Analysis = Field(Analysis(), description=Analysis.__doc__)
    frontier: Frontier = Field(Frontier(), description=Frontier.__doc__)
    sampling: Sampling = Field(Sampling(), description=Sampling.__doc__)
    benchmarks: Benchmarks = Field(Benchmarks(), description=Benchmarks.__doc__)
    resources: Resources = Field(Resources(), description=Resources.__doc__)
    machine: Machine = Field(Machine(), description=Machine.__doc__)

    @property
    def orthrus_models(self) -> list[str]:
        """The Orthrus models: the variants trained here, then the external checkpoints."""
        return [*self.models, *self.external_models]

    @model_validator(mode="after")
    def _study(self, info: ValidationInfo):
        """Names unique across the study's models and what names one; the models' sources against what runs
        on them, the prompts and corpus sources against each other, the engines, the training runs, the pinned
        revisions, kernels and device (orthrus/plan/config/rules.py, training.py), all named together."""
        problems = name_problems(self) + study_problems(self) + variant_problems(self) + machine_problems(self)
        check([("", p) for p in problems + scatter_problems(self, (info.context or {}).get("scatter") or {})])
        return self
