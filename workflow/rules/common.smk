# Glue between Snakemake and the study plan: the config checked (naming the key, before any job),
# the plan built from it (orthrus/plan: cells, paths, fingerprints, each job's arguments), and the
# few names the rules share. What the study is lives in the package, not here.
import os
import re
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "workflow", "scripts"))
from config_check import check_config, load_yaml, typed_overrides
from snakemake.utils import update_config

sys.path.insert(0, workflow.basedir)
from orthrus import contracts
from orthrus.plan import Study
from orthrus.plan.fingerprints import model_files, weights_fingerprint
from orthrus.plan.rule_args import cell_options, launcher, rule_name, scatter_index, settings

_SCHEMA = os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml")
# `--config` values typed by the schema: a nested override arrives with every value a string
update_config(config, typed_overrides(dict(workflow.config_settings.config), load_yaml(_SCHEMA)))
# `--set-scatter corpus=N` replaces corpus.shards: checked with it (Snakemake itself takes 0)
check_config(config, _SCHEMA, workflow.configfiles, scatter=dict(workflow.resource_settings.overwrite_scatter))
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
R = "results"
# Per-stage job resources (mem_mb, runtime, gpus, slurm_extra): the config check filled every
# schema default in, so the rules index the config directly
RES = config["resources"]
DEVICE = config["decode"]["device"]
TEACHER = S.teacher
DRAFT = S.draft
PRECISIONS, ATTENTIONS = S.precisions, S.attentions
EXTERNAL = S.external_models
EXTERNAL_TRAJ = S.external
TPF, FRONTIER, BENCH, SAMPLING = S.tpf, S.frontier, S.bench, S.sampling
ROUNDING_ULPS = S.rounding_ulps()
TABLE_FILES = list(contracts.TABLES)
BENCHMARK_TABLE_FILES = list(contracts.BENCHMARK_TABLES)
FIGURES = list(contracts.FIGURES)
CORPUS_SOURCE = config["corpus"]["source"]

if S.code_tasks_left_out() and BENCH["enabled"]:
    sys.stderr.write(f"benchmarks: {', '.join(S.code_tasks_left_out())} left out: it runs model-written code; set "
                     "benchmarks.allow_code_eval: true (and HF_ALLOW_CODE_EVAL=1 in the jobs' environment) to run it\n")


def corpus_shards():
    return gather.corpus(f"{R}/corpus/shard_{{scatteritem}}.parquet")
