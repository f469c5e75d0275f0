# Lossless in distribution (sampling.*, orthrus/audit/sampling.py, docs/SAMPLING.md): one Orthrus
# model's sampled loop against single-step sampling, the analytic TV in every cell and the
# two-sample test beside the planted biased sampler, in one job; then its tables and figure. Its
# functions are the plan's (orthrus/plan/sampling_plan.py).


rule sampling:
    input:
        model=S.models.input,
        prompts=rules.prompts.output.eval,
    output:
        tv=f"{R}/sampling/{{model}}-tv.parquet",
        two_sample=f"{R}/sampling/{{model}}-two-sample.parquet",
    params:
        weights=lambda w: weights_fingerprint(S.models.path(w.model)),  # new weights inside the directory rerun this
        model=lambda w: S.models.path(w.model),
        # the study's decoding setting (decode.*): the cells vary its precision, kernel, temperature and top-p
        options=lambda w: cell_options(config["decode"], "orthrus", PRECISIONS[0], ATTENTIONS[0]),
        cfg=S.sampling.audit_settings(),
        precisions=SAMPLING["precisions"] or PRECISIONS,
        attentions=SAMPLING["attentions"] or ATTENTIONS,
        device=DEVICE,
    log:
        f"{R}/logs/sampling/{{model}}.log",
    benchmark:
        f"{R}/timing/sampling/{{model}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["sampling"]["mem_mb"],
        runtime=RES["sampling"]["runtime"],
        gpu=RES["sampling"]["gpus"],
        slurm_extra=RES["sampling"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus sampling measure --model-path {params.model:q} --model-name {wildcards.model:q}"
        " --prompts {input.prompts:q} --options {params.options:q} --config {params.cfg:q}"
        " --precisions {params.precisions:q} --attentions {params.attentions:q} --device {params.device:q}"
        " --threads {threads:q} --out-tv {output.tv:q} --out-two-sample {output.two_sample:q} > {log:q} 2>&1"


rule sampling_table:
    input:
        tv=lambda w: [f"{R}/sampling/{S.sampling.model()}-tv.parquet"],
        two_sample=lambda w: [f"{R}/sampling/{S.sampling.model()}-two-sample.parquet"],
    output:
        tv=report(f"{R}/tables/sampling_tv.csv", caption="../report/table_sampling_tv.rst",
                  category="Tables", subcategory="Lossless in distribution"),
        two_sample=report(f"{R}/tables/sampling_two_sample.csv", caption="../report/table_sampling_two_sample.rst",
                          category="Tables", subcategory="Lossless in distribution"),
        figure=[report(f"{R}/figures/{contracts.SAMPLING_FIGURE}.png", caption="../report/figure_sampling_tv.rst",
                       category="Figures", subcategory="Lossless in distribution"),
                f"{R}/figures/{contracts.SAMPLING_FIGURE}.pdf"],
    params:
        length=config["decode"]["max_new_tokens"],
        alpha=SAMPLING["two_sample"]["alpha"],
        figure=lambda w, output: os.path.splitext(output.figure[0])[0],
    log:
        f"{R}/logs/sampling/table.log",
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus sampling table --tv {input.tv:q} --two-sample {input.two_sample:q} --length {params.length:q}"
        " --alpha {params.alpha:q} --out-tv {output.tv:q} --out-two-sample {output.two_sample:q}"
        " --figure {params.figure:q} > {log:q} 2>&1"


# sampling.engines (orthrus/engines/engine_samples.py): engines' sampled files, each pair (a speculative
# run against the same engine plain) given the two-sample test; the sampled export is what they sample
rule export_sampled_prompts:
    """The two-sample test's prompts with its sampling settings: `snakemake results/export/sampled.jsonl`."""
    input:
        S.models.teacher_input,
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/export/sampled.jsonl",
    params:
        teacher=S.models.teacher_path(),
        options=cell_options(config["decode"], contracts.EXTERNAL_DECODER, SAMPLING["two_sample"]["precision"], ATTENTIONS[0]),
        two_sample=settings(SAMPLING["two_sample"]),
    log:
        f"{R}/logs/export_sampled_prompts.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus export-prompts --model-path {params.teacher:q} --prompts {input.prompts:q}"
        " --options {params.options:q} --sampling {params.two_sample:q} --out {output:q} > {log:q} 2>&1"


import json

from orthrus.engines.engine import drafts_with
from orthrus.engines.runner import ENGINES

# sampling.engines entries with `engine` or `stand_in`: the engine samples the sampled export, one job per
# engine (vLLM: the project's recipe, imported once, each run its own engine with its own patches; llama.cpp:
# a server per run on the loopback, serving the GGUF files engines.smk's gguf_export converts; the stand-in:
# transformers' generate on the teacher, in this package's process)
_SAMPLED_RULES = set()
_SAMPLED_DRAFT = (S.models.draft_path() if DRAFT else None, S.models.draft_files())
for _engine in ENGINES.values():
    _runs = S.sampling.engine_runs(_SAMPLED_DRAFT[0], _engine.name)
    if not _runs:
        continue

    rule:
        name:
            rule_name(f"sampled_{_engine.name}", _SAMPLED_RULES)
        input:
            _engine.inputs(_runs, S.models.teacher_input(), _SAMPLED_DRAFT),
            prompts=rules.export_sampled_prompts.output[0],
        output:
            [r["out"] for r in _runs],
        params:
            engine=_engine.name,
            program=_engine.program(S.config) or "",
            model=_engine.model_path(S.models.teacher_path()),
            weights=lambda w, _runs=_runs: weights_fingerprint(S.models.teacher_path(), *([_SAMPLED_DRAFT[0]] if drafts_with(_runs, _SAMPLED_DRAFT[0]) else [])),  # new weights inside the directory rerun this
            runs=json.dumps(_runs),
        log:
            f"{R}/logs/sampling/{_engine.name}.log",
        threads: config["threads"]
        resources:
            mem_mb=RES["sampling"]["mem_mb"],
            runtime=RES["sampling"]["runtime"],
            gpu=RES["sampling"]["gpus"],
            slurm_extra=RES["sampling"]["slurm_extra"],
        conda:
            ENV
        shell:
            "orthrus engine-run --engine {params.engine:q} --program={params.program:q} --model-path={params.model:q}"
            " --prompts {input.prompts:q} --runs {params.runs:q} --threads {threads:q} > {log:q} 2>&1"


rule sampling_engines:
    input:
        S.models.teacher_input,
        export=rules.export_sampled_prompts.output[0],
        files=[e["path"] for e in S.sampling.engines().values()],
    output:
        report(f"{R}/tables/sampling_engines.csv", caption="../report/table_sampling_engines.rst",
               category="Tables", subcategory="Lossless in distribution"),
    params:
        teacher=S.models.teacher_path(),
        entries=settings(S.sampling.engines()),
        alpha=SAMPLING["two_sample"]["alpha"],
    log:
        f"{R}/logs/sampling/engines.log",
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus engine-samples --export {input.export:q} --model-path {params.teacher:q} --entries {params.entries:q}"
        " --alpha {params.alpha:q} --out {output:q} > {log:q} 2>&1"
