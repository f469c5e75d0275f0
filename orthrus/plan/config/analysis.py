"""`analysis`: the study's statistics (the verdicts' rounding bound is orthrus/audit/verdict.py
ROUNDING_ULPS; `analysis.power` is the claims stage's own section, orthrus/report/claims/power.py); `benchmarks`: the downstream tasks through lm-evaluation-harness; `resources`: what each
stage's jobs ask of a cluster."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.audit.verdict import ROUNDING_ULPS
from orthrus.config import Int, Name, Num, Section, check, opt, unique
from orthrus.plan.config.decode import Attention, Precision
from orthrus.report.claims.power import Power
from orthrus.world.tiny_tasks import TASKS

TINY_TASKS = tuple(sorted(TASKS))  # the tiny world's local lm-eval tasks
Ulps = Annotated[Num, Field(ge=0, le=1024)]


class RoundingUlps(Section):
    """The largest margin between the reference's token and a decoder's at a first divergence that the verdict
    `rounding` accepts, in units in the last place of the precision at the logits' magnitude; each default is
    twice the largest measured by benchmarks/rounding_noise.py, rounded up to a power of two
    (orthrus/audit/verdict.py)."""

    bf16: Ulps = ROUNDING_ULPS["bf16"]
    fp16: Ulps = ROUNDING_ULPS["fp16"]
    fp32: Ulps = ROUNDING_ULPS["fp32"]
    tf32: Ulps = ROUNDING_ULPS["tf32"]


class Analysis(Section):
    """Statistics of the study."""

    ppl_precision: Precision = Field(
        "fp32", description="Precision of the teacher when scoring reference responses (response-conditional PPL)."
    )
    ppl_attention: Attention = Field(
        "eager",
        description="Attention implementation of the perplexity scorer (the authors scored with "
        "flash_attention_2 in bf16).",
    )
    near_tie: Num = Field(
        0.125,
        ge=0,
        le=2,
        description="Top-1/top-2 logit margin below which a divergence counts as a near-tie, in logits (not a "
        "percent).",
    )
    rounding_ulps: RoundingUlps = Field(RoundingUlps(), description=RoundingUlps.__doc__)
    equivalence_margin: Num = Field(
        2.0,
        gt=0,
        description="Equivalence margin of the benchmark claim, in points of the task's score (0-100): the paired "
        "score difference against the AR reference must lie inside +-margin by TOST at 5%.",
    )
    alpha: Num = Field(
        0.05,
        gt=0,
        lt=0.5,
        description="Level of the claims' tests with a p-value (beta1, Welch's test of the perplexities, TOST).",
    )
    power: Power = Field(Power(), description=Power.__doc__)


class Benchmarks(Section):
    """Downstream tasks through lm-evaluation-harness (Table 7)."""

    enabled: bool = Field(True, description="Run the benchmarks stage.")
    tasks: unique(Name) = Field(
        [], description="lm-eval task names (a name, not a path segment: no leading `.` or `-`, no `/`)."
    )
    tiny_tasks: bool | unique(Literal[TINY_TASKS], min_length=1) = Field(
        True,
        description="Generate the tiny world's local tasks (offline default): true for all five, or a list of "
        "their names.",
    )
    n_docs: Annotated[Int, Field(ge=1)] | dict[Literal[TINY_TASKS], Annotated[Int, Field(ge=1)]] = Field(
        40,
        description="Documents per tiny-world task: one count, or {task: count} naming each task that runs.",
    )
    limit: opt(Int, ge=1) = Field(None, description="lm-eval --limit (null = all documents).")
    precisions: unique(Precision, min_length=1) = Field(["bf16", "fp32"], description="Precisions to benchmark at.")
    attention: Attention = Field("eager", description="Attention implementation for the benchmarks.")
    max_gen_toks: opt(Int, ge=1) = Field(
        128, description="Generation cap per request; null = each task's own generation length (the authors')."
    )
    chat_template: bool = Field(
        True,
        description="Render prompts through the chat template as the trajectory study does; false = plain "
        "prompts (the authors').",
    )
    ar_baseline: Literal["ours", "hf"] = Field(
        "ours",
        description="The teacher's AR baseline: our AR loop (decoder ar) or lm-eval's own HF generate "
        "(decoder ar-ref, the authors').",
    )
    allow_code_eval: bool = Field(
        False, description="Opt in to running model-written code (HumanEval); also needs HF_ALLOW_CODE_EVAL=1."
    )
    include_paths: list[Annotated[str, Field(min_length=1)]] = Field(
        [],
        description="Extra lm-eval task directories (--include_path): a task file there replaces the built-in task "
        "of its name.",
    )

    @model_validator(mode="after")
    def _rules(self):
        """Benchmarks that would run nothing: no task, only code tasks without the opt-in, a per-task
        document count that misses a task or names one that does not run."""
        if not self.enabled:
            return self
        lines, tiny, docs = [], self.tiny_tasks, self.n_docs
        if not tiny and not self.tasks:
            lines.append(("tasks", "empty, but benchmarks are enabled without tiny_tasks"))
        elif not tiny and not self.allow_code_eval and all("humaneval" in t for t in self.tasks):
            lines.append(
                (
                    "tasks",
                    "every task runs model-written code, and benchmarks.allow_code_eval is false: opt "
                    "in, or add tasks that do not (e.g. gsm8k, ifeval)",
                )
            )
        if isinstance(docs, dict):
            runs = list(TINY_TASKS) if tiny is True else list(tiny or [])
            missing, idle = [t for t in runs if t not in docs], [t for t in docs if t not in runs]
            lines += [
                (
                    "n_docs",
                    f"no count for {', '.join(missing)}, which benchmarks.tiny_tasks runs (a mapping "
                    "names each task that runs)",
                )
                if missing
                else None,
                ("n_docs", f"{', '.join(idle)} not in benchmarks.tiny_tasks, so its count would prepare nothing")
                if idle
                else None,
            ]
        check(lines)
        return self


class Stage(Section):
    """The resources of one stage's jobs; the defaults fit the tiny CPU study."""

    mem_mb: Int = Field(4000, ge=1, description="Memory per job in MB.")
    runtime: Int = Field(60, ge=1, description="Wall-clock limit per job in minutes.")
    gpus: Int = Field(
        0, ge=0, description="GPUs per job (the `gpu` resource; the slurm executor requests them with --gpus)."
    )
    slurm_extra: str = Field(
        "",
        description="Extra sbatch flags for this stage, e.g. --constraint=h100 or --qos=long (not --gpus / "
        "--mem / --time, which come from the keys above).",
    )


class Training(Stage):
    mem_mb: Int = Field(8000, ge=1, description="Memory per job in MB.")
    runtime: Int = Field(120, ge=1, description="Wall-clock limit per job in minutes.")


class LmEval(Stage):
    runtime: Int = Field(120, ge=1, description="Wall-clock limit per job in minutes.")


class Light(Stage):
    mem_mb: Int = Field(2000, ge=1, description="Memory per job in MB.")
    runtime: Int = Field(30, ge=1, description="Wall-clock limit per job in minutes.")


def stage(kind: type[Stage], description: str):
    return Field(kind(), description=description)


class Resources(Section):
    """Per-stage job resources, declared by every rule (`mem_mb`, `runtime`, `gpu`, `slurm_extra`). Local runs only
    use them when limited with `--resources`; cluster executors (profiles/slurm) turn them into the job request. The
    defaults fit the tiny CPU study."""

    teacher: Stage = stage(Stage, "train_teacher: trains the tiny teacher (tiny source only).")
    prompts: Stage = stage(Stage, "prompts: samples or downloads the evaluation and distillation prompt sets.")
    corpus: Stage = stage(Stage, "corpus_shard: one shard of the teacher's greedy answers (batched generation).")
    train: Training = stage(
        Training, "train: distillation of one Orthrus variant (gpus > 1 launches torchrun with one process per GPU)."
    )
    decode: Stage = stage(Stage, "decode_shard: one shard of one (model, decoder, precision, attention) decoding run.")
    frontier: Stage = stage(
        Stage, "frontier: the price-of-exactness measurement (every setting on a few prompts, one job)."
    )
    sampling: Stage = stage(
        Stage, "sampling: the sampling audit of one Orthrus model (every cell and the two-sample test, one job)."
    )
    tpf: Stage = stage(Stage, "tpf_decode: one unsharded TPF run (tpf.*) of one Orthrus model, every prompt.")
    perplexity: Stage = stage(Stage, "perplexity: the reference model scores every reference trajectory.")
    forensics: Stage = stage(
        Stage, "forensics: exact replay of the diverging trajectories of one (model, precision, attention)."
    )
    lm_eval: LmEval = stage(LmEval, "lm_eval: one lm-evaluation-harness run (model x decoder x precision).")
    light: Light = stage(
        Light,
        "Everything else (gathers, tables, figures, benchmark task data); most run on the submit host (localrule).",
    )
