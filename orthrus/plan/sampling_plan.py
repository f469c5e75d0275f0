"""The plan of the sampled side runs (`sampling.*`, workflow/rules/sampling.smk): the in-process
audit's model and tables, and the engines' sampled files (sampling.engines), each entry its own seed."""

from __future__ import annotations

from orthrus import contracts
from orthrus.audit.settings import SampledAudit
from orthrus.plan.paths import R
from orthrus.plan.rule_args import settings


class SamplingPlan:
    """`models` answers the teacher's name and the Orthrus models (`teacher`, `orthrus`)."""

    def __init__(self, config, models):
        self.config, self.sampling, self.models = config, config.sampling, models

    def model(self) -> str | None:
        """The model the sampling audit measures (sampling.enabled): its own, or the first Orthrus model."""
        if not self.sampling.enabled or not self.models.orthrus:
            return None
        return self.sampling.model or self.models.orthrus[0]

    def audit_settings(self) -> str:
        """The keys of `sampling` that `orthrus sampling measure` reads (orthrus/audit/settings.py), as JSON:
        which model and cells it measures, and the engines' files, are the plan's."""
        data = self.sampling.model_dump()
        return settings({k: data[k] for k in SampledAudit.model_fields})

    def tables(self) -> list[str]:
        """The sampling audit's tables (none when it is off): the claims read them."""
        return [f"{R}/tables/{t}" for t in contracts.SAMPLING_TABLES] if self.model() else []

    def outputs(self) -> list[str]:
        figures = [f"{R}/figures/{contracts.SAMPLING_FIGURE}.{e}" for e in contracts.FIGURE_FORMATS]
        engines = [f"{R}/tables/{t}" for t in contracts.SAMPLING_ENGINE_TABLES] if self.engines() else []
        return self.tables() + (figures if self.model() else []) + engines

    def engines(self) -> dict:
        """sampling.engines: engines' sampled files, each pair tested by `orthrus engine-samples`, as the
        engines read them (data: the keys given)."""
        return {n: e.model_dump() for n, e in self.sampling.engines.items()}

    def _seeds(self) -> dict[str, int]:
        """The first seed of each sampling.engines entry the workflow samples (a stand-in or an engine):
        its own, else its rank x 1000 + sampling.seed, so no two share one."""
        return {
            n: e.seed if e.seed is not None else rank * 1000 + self.sampling.seed
            for rank, (n, e) in enumerate(self.sampling.engines.items())
            if e.stand_in or e.engine
        }

    def engine_runs(self, draft: str | None, engine: str) -> list[dict]:
        """The runs of the sampling.engines entries `engine` samples, as the engine makes them
        (orthrus/engines/engine.py), at two_sample's precision, each from its first seed; an entry with
        `stand_in` is the transformers engine's."""
        from orthrus.engines.runner import ENGINES, as_engine_entry

        seeds, precision = self._seeds(), self.sampling.two_sample.precision
        found = {n: as_engine_entry(e) for n, e in self.engines().items()}
        return [
            ENGINES[engine].run(
                n, e, e["path"], precision, seeds[n], self.config, results=R, teacher=self.models.teacher, draft=draft
            )
            for n, e in found.items()
            if e.get("engine") == engine
        ]
