"""The lm-eval benchmarks' plan (benchmarks.*, Table 7; workflow/rules/benchmarks.smk): the tasks,
the tiny tasks' documents, and one result per model and precision."""

from __future__ import annotations

from orthrus import contracts
from orthrus.decoders import DIFFUSION_DECODER
from orthrus.plan.decode_plan import VIEW
from orthrus.plan.paths import R


class BenchmarksPlan:
    """`enabled` (benchmarks.enabled); `models` answers the teacher's and the Orthrus models' names."""

    def __init__(self, config, models):
        self.bench, self.models = config.benchmarks, models
        self.enabled = self.bench.enabled

    def code_tasks_left_out(self) -> list[str]:
        """Tasks that run model-written code, left out unless benchmarks.allow_code_eval opts in."""
        b = self.bench
        if b.allow_code_eval or b.tiny_tasks:
            return []
        return [t for t in b.tasks if contracts.runs_model_code(t)]

    def tasks(self) -> str:
        b = self.bench
        if b.tiny_tasks is True:
            from orthrus.world.tiny_tasks import TASKS

            return ",".join(TASKS)
        if b.tiny_tasks:
            return ",".join(b.tiny_tasks)
        return ",".join(t for t in b.tasks if t not in self.code_tasks_left_out())

    def docs(self):
        """prepare-data's --n: one count, or TASK=N for each task (benchmarks.n_docs)."""
        n = self.bench.n_docs
        return ",".join(f"{t}={c}" for t, c in n.items()) if isinstance(n, dict) else n

    def files(self) -> list[str]:
        """The teacher through its AR view (benchmarks.ar_baseline ours) or lm-eval's own HF
        generate (hf: the reference decoder), every Orthrus model through its consensus loop."""
        baseline = contracts.REFERENCE_DECODER if self.bench.ar_baseline == "hf" else VIEW
        runs = [(self.models.teacher, baseline)] + [(m, DIFFUSION_DECODER) for m in self.models.orthrus]
        return [
            f"{R}/benchmarks/{m}/{d}-{p}-{self.bench.attention}.json" for m, d in runs for p in self.bench.precisions
        ]
