# The Orthrus exactness study: teacher -> corpus -> distillation -> decoding at every
# precision -> trajectory matching, perplexity, forensics -> benchmarks -> tables, figures, report.
from snakemake.utils import min_version

min_version("9.0")


from orthrus.plan.study_config import EMBEDDED, study_config
from orthrus.zoo.cases import read_zoo

# A config file with a `zoo` section runs the bug zoo instead of the study (configs/zoo.yaml,
# docs/ZOO.md): its cases are checked by their own typed model (orthrus/zoo/cases.py).
ZOO = read_zoo(workflow.overwrite_configfiles)

if ZOO:

    include: "workflow/rules/zoo.smk"

    rule all:
        input:
            rules.zoo_record.output,
        default_target: True

else:
    # The config, read, defaulted and checked once, here, before any rule (orthrus/plan/study_config.py):
    # `--configfile X Y` lays X, then Y, on the embedded config.yaml as overlays (orthrus/plan/overlay.py
    # states the rule: a paper-scale overlay's models replace the default's), `--config k=v` lays values
    # over them, `--set-scatter` is checked with it; one ConfigError names every key that is wrong. The
    # files are read again as data: what Snakemake built from them is replaced. Snakemake has rendered
    # a `--configfile` that sets `__use_yte__` before this runs (docs/USAGE.md): `orthrus
    # check-config FILE` checks a file you did not write first.
    _checked = study_config(
        workflow.overwrite_configfiles or [EMBEDDED],
        workflow.config_settings.config,
        workflow.resource_settings.overwrite_scatter,
    )
    config.clear()
    config.update(_checked)
    if not workflow.overwrite_configfiles:
        workflow.configfiles.append(EMBEDDED)  # named in the run's header and the report, as `configfile:` did


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
    include: "workflow/rules/machine.smk"


    report: "workflow/report/workflow.rst"


    rule all:
        input:
            S.report.final_outputs(corpus_shards()),
        default_target: True
