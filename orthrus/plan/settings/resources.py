"""`resources`: what each stage's jobs ask of a cluster (profiles/slurm turns them into the job
request; a local run uses them only when limited with `--resources`)."""

from orthrus.plan.settings.keys import key, section


def stage(description: str, mem_mb: int = 4000, runtime: int = 60) -> dict:
    """The resources of one stage's jobs; the defaults fit the tiny CPU study."""
    return section(
        description,
        {
            "mem_mb": key(int, mem_mb, "Memory per job in MB.", minimum=1),
            "runtime": key(int, runtime, "Wall-clock limit per job in minutes.", minimum=1),
            "gpus": key(
                int, 0, "GPUs per job (the `gpu` resource; the slurm executor requests them with --gpus).", minimum=0
            ),
            "slurm_extra": key(
                str,
                "",
                "Extra sbatch flags for this stage, e.g. --constraint=h100 or --qos=long (not --gpus / --mem / "
                "--time, which come from the keys above).",
            ),
        },
        default={},
    )


RESOURCES = section(
    "Per-stage job resources, declared by every rule (`mem_mb`, `runtime`, `gpu`, `slurm_extra`). "
    "Local runs only use them when limited with `--resources`; cluster executors (profiles/slurm) "
    "turn them into the job request. The defaults fit the tiny CPU study.",
    {
        "teacher": stage("train_teacher: trains the tiny teacher (tiny source only)."),
        "prompts": stage("prompts: samples or downloads the evaluation and distillation prompt sets."),
        "corpus": stage("corpus_shard: one shard of the teacher's greedy answers (batched generation)."),
        "train": stage(
            "train: distillation of one Orthrus variant (gpus > 1 launches torchrun with one process per GPU).",
            mem_mb=8000,
            runtime=120,
        ),
        "decode": stage("decode_shard: one shard of one (model, decoder, precision, attention) decoding run."),
        "frontier": stage("frontier: the price-of-exactness measurement (every setting on a few prompts, one job)."),
        "sampling": stage(
            "sampling: the sampling audit of one Orthrus model (every cell and the two-sample test, one job)."
        ),
        "tpf": stage("tpf_decode: one unsharded TPF run (tpf.*) of one Orthrus model, every prompt."),
        "perplexity": stage("perplexity: the reference model scores every reference trajectory."),
        "forensics": stage(
            "forensics: exact replay of the diverging trajectories of one (model, precision, attention)."
        ),
        "lm_eval": stage("lm_eval: one lm-evaluation-harness run (model x decoder x precision).", runtime=120),
        "light": stage(
            "Everything else (gathers, tables, figures, benchmark task data); most run on the submit host (localrule).",
            mem_mb=2000,
            runtime=30,
        ),
    },
    default={},
)
