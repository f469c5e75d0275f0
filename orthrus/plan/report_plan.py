"""What `snakemake` builds (the `all` rule): the study's tables, figures and claims, and the side
runs' tables where they are enabled, the machine axis's comparison where it has two environments."""

from __future__ import annotations

from orthrus import contracts
from orthrus.plan.paths import R


class ReportPlan:
    """The final outputs, from the other stages' plans: `decode` (its models and decoders),
    `engines` (their files), `benchmarks`, `sampling` (whether each runs), `machine` (its comparison)."""

    def __init__(self, decode, engines, benchmarks, sampling, machine=None):
        self.decode, self.engines, self.benchmarks, self.sampling = decode, engines, benchmarks, sampling
        self.machine = machine

    @staticmethod
    def study_outputs() -> list[str]:
        """The trajectory study's tables, claims and figures."""
        tables = list(contracts.TABLES) + list(contracts.CLAIMS_TABLES)
        return [f"{R}/tables/{t}" for t in tables] + [
            f"{R}/figures/{f}.{e}" for f in contracts.FIGURES for e in contracts.FIGURE_FORMATS
        ]

    def final_outputs(self, corpus_shards: list[str]) -> list[str]:
        """What `snakemake` builds: the study's tables wherever something is compared with the
        reference (an Orthrus model, a decoder on the teacher, an engine's file), else the corpus and
        the decodings; the benchmarks and the frontier where enabled."""
        d = self.decode
        studied = d.models.orthrus or d.teacher_decoders or self.engines.entries
        outputs = self.study_outputs() if studied else corpus_shards + d.files()
        if self.benchmarks.enabled:
            outputs += [f"{R}/tables/benchmarks.csv"]
        if d.frontier_files():
            outputs += [f"{R}/tables/exactness_cost.csv"]
        outputs += self.sampling.outputs()
        return outputs + (self.machine.outputs() if self.machine else [])
