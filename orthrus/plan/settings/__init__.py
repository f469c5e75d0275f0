"""The config's typed settings: every key of a study's config, its type, default, description and
rules, stated once; `python -m orthrus.plan.schema` writes workflow/schemas/config.schema.yaml (the
JSON Schema Snakemake validates with) from `SCHEMA`, and docs/CONFIG.md is generated from that.

One module per part of the config (teacher, data, models, decode, side_runs, analysis, resources),
written with the helpers of `keys`. A default a settings object of the package holds (the training
settings, the tiny teacher's, the decoding options, the frontier's, the rounding bound) is taken
from it, never written again here.
"""

from orthrus.distill.settings import SEED_MAX
from orthrus.plan.settings.analysis import ANALYSIS, BENCHMARKS
from orthrus.plan.settings.data import CORPUS, DATASET, PROMPTS
from orthrus.plan.settings.decode import DECODE, ENGINES
from orthrus.plan.settings.keys import key
from orthrus.plan.settings.models import EXTERNAL_MODELS, MODELS, REVISIONS
from orthrus.plan.settings.resources import RESOURCES
from orthrus.plan.settings.side_runs import FRONTIER, SAMPLING, TPF
from orthrus.plan.settings.teacher import TEACHER

SEED = key(
    int,
    0,
    (
        "Global seed, 0 to 2^64 - 1 (the range torch's generators take; numpy's take any size, and "
        "lm-eval's numpy seed is taken modulo 2^32); every stage that draws anything derives its own seed"
        " from it: the prompts, each variant's distillation (its `seed` plus this one: initialisation of "
        "the diffusion view, block positions, shuffles), the tiny benchmark documents and, with "
        "teacher.source tiny, the teacher (initialisation, tokenizer, training data) and its draft (a "
        "shipped subject is fixed: built at seed 0); decoding and the teacher's corpus are greedy. "
        "`snakemake --config seed=N` is another realisation of the study on the same subject "
        "(`benchmarks/seed_spread.py` runs several)."
    ),
    minimum=0,
    maximum=SEED_MAX,
)

THREADS = key(
    int, 1, "torch threads per job (1 is fastest for the tiny models; jobs run in parallel instead).", minimum=1
)


SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "description": "Configuration of the Orthrus exactness study. `config.yaml` is the embedded default (a tiny "
    "world trained on CPU); `configs/paper.yaml` is the paper scale. Unknown keys are errors.",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "seed": SEED,
        "threads": THREADS,
        "teacher": TEACHER,
        "prompts": PROMPTS,
        "corpus": CORPUS,
        "models": MODELS,
        "revisions": REVISIONS,
        "external_models": EXTERNAL_MODELS,
        "decode": DECODE,
        "engines": ENGINES,
        "tpf": TPF,
        "analysis": ANALYSIS,
        "frontier": FRONTIER,
        "sampling": SAMPLING,
        "benchmarks": BENCHMARKS,
        "resources": RESOURCES,
    },
    "required": ["teacher", "prompts", "corpus", "decode"],
    "$defs": {"dataset": DATASET},
}
