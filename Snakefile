# The Orthrus exactness study: teacher -> corpus -> distillation -> decoding at every
# precision -> trajectory matching, perplexity, forensics -> benchmarks -> tables, figures, report.
from snakemake.utils import min_version

min_version("9.0")


import os
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "workflow", "scripts"))
from config_check import refuse_hazards

# Config files are data (config_check.yaml_hazards): the embedded config.yaml is checked here,
# before Snakemake renders it; a --configfile was checked by the workflow profile
# (profiles/default/config.yaml) before Snakemake read it, and is checked again here for a run
# without that profile (`--workflow-profile none`, where Snakemake has already rendered it).
refuse_hazards(workflow.overwrite_configfiles or ["config.yaml"])


# `--configfile X` studies X instead of the embedded default (rather than merging the two,
# which would add the default's tiny variants to a paper-scale run); `--config k=v` still overrides.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/external.smk"
include: "workflow/rules/sampling.smk"
include: "workflow/rules/engines.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/benchmarks.smk"
include: "workflow/rules/frontier.smk"


report: "workflow/report/workflow.rst"


rule all:
    input:
        S.final_outputs(corpus_shards()),
    default_target: True
