# Glue between Snakemake and the study plan: the plan built from the config the Snakefile checked
# (orthrus/plan: cells, paths, fingerprints, each job's arguments), and the few names the rules
# share. What the study is lives in the package, not here.
import os
import re
import sys

from orthrus import contracts
from orthrus.plan import Study
from orthrus.plan.fingerprints import weights_fingerprint
from orthrus.plan.paths import R
from orthrus.plan.rule_args import cell_options, launcher, rule_name, scatter_index, settings

S = Study(config)

scattergather:
    corpus=config["corpus"]["shards"],
    decode=config["decode"]["shards"],


wildcard_constraints:
    # an engine's file is ingested (workflow/rules/external.smk), never decoded
    decoder="|".join(d for d in contracts.DECODERS if d != contracts.EXTERNAL_DECODER),
    precision="|".join(contracts.PRECISIONS),
    attention="|".join(contracts.ATTENTIONS),
    model=contracts.NAME,


ENV = "../../envs/orthrus.yaml"
# Per-stage job resources (mem_mb, runtime, gpus, slurm_extra): the config model filled every
# default in, so the rules index the config directly
RES = config["resources"]
DEVICE = config["decode"]["device"]
TEACHER = S.models.teacher
DRAFT = S.models.draft
PRECISIONS, ATTENTIONS = S.decode.precisions, S.decode.attentions
EXTERNAL_TRAJ = S.engines.entries
TPF, FRONTIER, BENCH, SAMPLING = config["tpf"], config["frontier"], config["benchmarks"], config["sampling"]
ROUNDING_ULPS = S.analysis.rounding_ulps()
TABLE_FILES = list(contracts.TABLES)
BENCHMARK_TABLE_FILES = list(contracts.BENCHMARK_TABLES)
FIGURES = list(contracts.FIGURES)
CORPUS_SOURCE = config["corpus"]["source"]

if S.benchmarks.code_tasks_left_out() and BENCH["enabled"]:
    sys.stderr.write(f"benchmarks: {', '.join(S.benchmarks.code_tasks_left_out())} left out: it runs model-written code; set "
                     "benchmarks.allow_code_eval: true (and HF_ALLOW_CODE_EVAL=1 in the jobs' environment) to run it\n")


def corpus_shards():
    return gather.corpus(f"{R}/corpus/shard_{{scatteritem}}.parquet")
