# The Orthrus exactness study: teacher -> corpus -> distillation -> decoding at every
# precision -> trajectory matching, perplexity, forensics -> benchmarks -> tables, figures, report.
from snakemake.utils import min_version

min_version("9.0")


# `--configfile X` studies X instead of the embedded default (rather than merging the two,
# which would add the default's tiny variants to a paper-scale run); `--config k=v` still overrides.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/benchmarks.smk"


report: "workflow/report/workflow.rst"


rule all:
    input:
        final_outputs(),
    default_target: True
