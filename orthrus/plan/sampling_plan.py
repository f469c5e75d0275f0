"""The plan of the sampled side runs (`sampling.*`): the in-process audit's model and tables, and
the engines' sampled files (sampling.engines), each entry its own seed. A mixin of
orthrus/plan/study.py's Study, which holds `sampling`, `config`, `teacher` and `orthrus_models`."""

from __future__ import annotations

from orthrus import contracts

R = "results"


class SamplingPlan:
    def sampling_model(self) -> str | None:
        """The model the sampling audit measures (sampling.enabled): its own, or the first Orthrus model."""
        if not self.sampling["enabled"] or not self.orthrus_models:
            return None
        return self.sampling["model"] or self.orthrus_models[0]

    def sampling_tables(self) -> list[str]:
        """The sampling audit's tables (none when it is off): the claims read them."""
        return [f"{R}/tables/{t}" for t in contracts.SAMPLING_TABLES] if self.sampling_model() else []

    def sampling_outputs(self) -> list[str]:
        figures = [f"{R}/figures/{contracts.SAMPLING_FIGURE}.{e}" for e in contracts.FIGURE_FORMATS]
        engines = [f"{R}/tables/{t}" for t in contracts.SAMPLING_ENGINE_TABLES] if self.sampled_engines() else []
        return self.sampling_tables() + (figures if self.sampling_model() else []) + engines

    def sampled_engines(self) -> dict:
        """sampling.engines: engines' sampled files, each pair tested by `orthrus engine-samples`."""
        return self.sampling["engines"]

    def _sampled_seeds(self) -> dict[str, int]:
        """The first seed of each sampling.engines entry the workflow samples (a stand-in or an engine):
        its own, else its rank x 1000 + sampling.seed, so no two share one."""
        return {
            n: e["seed"] if e.get("seed") is not None else rank * 1000 + int(self.sampling["seed"])
            for rank, (n, e) in enumerate(self.sampled_engines().items())
            if e.get("stand_in") or e.get("engine")
        }

    def sampled_engine_runs(self, draft: str | None, engine: str = "vllm") -> list[dict]:
        """The runs of the sampling.engines entries `engine` samples, as the engine makes them
        (orthrus/engines/engine.py), at two_sample's precision, each from its first seed; an entry with
        `stand_in` is the transformers engine's."""
        from orthrus.engines.runner import ENGINES, as_engine_entry

        seeds, precision = self._sampled_seeds(), self.sampling["two_sample"]["precision"]
        found = {n: as_engine_entry(e) for n, e in self.sampled_engines().items()}
        return [
            ENGINES[engine].run(
                n, e, e["path"], precision, seeds[n], self.config, results=R, teacher=self.teacher, draft=draft
            )
            for n, e in found.items()
            if e.get("engine") == engine
        ]
