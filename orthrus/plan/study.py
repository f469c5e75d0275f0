"""The study a validated config asks for, as one plan per stage: its models, data, decoding cells,
engines, analysis, benchmarks, sampled side runs, machine axis and final outputs, each with its input and output
paths, the content fingerprints that rerun what new weights or files change, and its jobs' arguments.

The workflow (workflow/rules/*.smk) only runs it: each rule reads the plan of its stage
(`S.decode.cells(...)`, `S.sampling.outputs()`) for its inputs and params, so what the study is can
be tested without Snakemake (tests/test_plan.py), each plan on its own. Pure Python (no torch): the
workflow builds it while it is parsed.
"""

from __future__ import annotations

from orthrus.plan.analysis_plan import AnalysisPlan
from orthrus.plan.benchmarks_plan import BenchmarksPlan
from orthrus.plan.data_plan import DataPlan
from orthrus.plan.decode_plan import DecodePlan
from orthrus.plan.engines_plan import EnginesPlan
from orthrus.plan.machine_plan import MachinePlan
from orthrus.plan.models_plan import ModelsPlan
from orthrus.plan.report_plan import ReportPlan
from orthrus.plan.sampling_plan import SamplingPlan


class Study:
    """The plans of one checked config (a StudyConfig, or the data Snakemake holds, checked again); a
    plan is given the config and the plans it reads."""

    def __init__(self, config):
        from orthrus.plan.config import StudyConfig
        from orthrus.plan.study_config import checked

        self.config = config = config if isinstance(config, StudyConfig) else checked(config)
        self.models = ModelsPlan(config)
        self.data = DataPlan(config, self.models)
        self.engines = EnginesPlan(config)
        self.decode = DecodePlan(config, self.models, self.engines)
        self.analysis = AnalysisPlan(config, self.decode, self.engines)
        self.benchmarks = BenchmarksPlan(config, self.models)
        self.sampling = SamplingPlan(config, self.models)
        self.machine = MachinePlan(config, self.decode)
        self.report = ReportPlan(self.decode, self.engines, self.benchmarks, self.sampling, self.machine)
