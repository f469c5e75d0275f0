# The machine as an axis (machine.*, docs/MACHINES.md): every numerical environment (a CPU kind and a
# thread count, KIND-tTHREADS) gets a probe of what its libraries run; each one but the study's own
# decodes machine.cells again under its kind and threads, with its perplexity and forensics; every
# one, the study's own too, is analysed alike from those cells and states its claims; then one
# comparison of every environment's verdicts, which the study's claims read. Its functions are the
# plan's (orthrus/plan/machine_plan.py).

if S.machine.skipped:
    sys.stderr.write("".join(f"{line}\n" for line in S.machine.skipped))


wildcard_constraints:
    env="|".join(re.escape(e) for e in S.machine.envs),


rule machine_probe:
    """What ATen, oneDNN and oneMKL run under the environment's kind and threads, and the bytes of a few products."""
    output:
        f"{R}/machine/{{env}}/probe.json",
    params:
        kind=S.machine.kind_of,
        threads=S.machine.threads_of,
    log:
        f"{R}/logs/machine/{{env}}/probe.log",
    benchmark:
        f"{R}/timing/machine/{{env}}/probe.tsv"
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus --cpu-kind {params.kind:q} machine-probe --threads {params.threads:q} --out {output:q} > {log:q} 2>&1"


rule machine_decode:
    """One cell of an extra environment, as decode_shard decodes it (one shard), under the environment's kind
    and threads."""
    input:
        S.decode.model_input,
        prompts=rules.prompts.output.eval,
        draft=S.decode.draft_input,
        reference=S.machine.reference_input,
    output:
        f"{R}/machine/{{env}}/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.parquet",
    params:
        kind=S.machine.kind_of,
        threads=S.machine.threads_of,
        model=S.decode.model_arg,
        device=DEVICE,
        max_error_share=config["decode"]["max_error_share"],
        options=lambda w: cell_options(config["decode"], w.decoder, w.precision, w.attention),
        draft=S.decode.draft_args,
        reference=lambda w, input: ["--reference", *input.reference] if input.reference else [],
        subset=S.machine.cell_prompts,
        weights=S.decode.weights,
    log:
        f"{R}/logs/machine/{{env}}/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.log",
    benchmark:
        f"{R}/timing/machine/{{env}}/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.tsv"
    # the environment's threads decide the job's (--threads below); Snakemake's count only schedules it
    threads: S.machine.threads_of
    resources:
        mem_mb=RES["decode"]["mem_mb"],
        runtime=RES["decode"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus --cpu-kind {params.kind:q} decode --model-path {params.model:q} --model-name {wildcards.model:q}"
        " --prompts {input.prompts:q} --options {params.options:q} {params.draft:q} {params.reference:q}"
        " {params.subset:q} --device {params.device:q} --max-error-share {params.max_error_share:q}"
        " --threads {params.threads:q} --out {output:q} > {log:q} 2>&1"


rule machine_perplexity:
    """An extra environment's reference scored by the teacher, as `perplexity` scores the study's."""
    input:
        S.models.teacher_input,
        prompts=rules.prompts.output.eval,
        ref=S.machine.ppl_decoded,
    output:
        f"{R}/machine/{{env}}/ppl.parquet",
    params:
        kind=S.machine.kind_of,
        threads=S.machine.threads_of,
        teacher=S.models.teacher_path(),
        precision=config["analysis"]["ppl_precision"],
        attention=config["analysis"]["ppl_attention"],
        device=DEVICE,
    log:
        f"{R}/logs/machine/{{env}}/perplexity.log",
    benchmark:
        f"{R}/timing/machine/{{env}}/perplexity.tsv"
    threads: S.machine.threads_of
    resources:
        mem_mb=RES["perplexity"]["mem_mb"],
        runtime=RES["perplexity"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus --cpu-kind {params.kind:q} perplexity --teacher {params.teacher:q} --prompts {input.prompts:q}"
        " --decode {input.ref:q} --precision {params.precision:q} --attention {params.attention:q}"
        " --device {params.device:q} --threads {params.threads:q} --out {output:q} > {log:q} 2>&1"


rule machine_forensics:
    """An extra environment's divergences on one model explained against its own reference, as `forensics`."""
    input:
        model=S.models.input,
        prompts=rules.prompts.output.eval,
        decoded=S.machine.forensics_decoded,
        ref=S.machine.forensics_reference,
    output:
        f"{R}/machine/{{env}}/forensics/{{model}}.parquet",
    params:
        kind=S.machine.kind_of,
        threads=S.machine.threads_of,
        model=lambda w: S.models.path(w.model),
        device=DEVICE,
        rounding_ulps=ROUNDING_ULPS,
    log:
        f"{R}/logs/machine/{{env}}/forensics/{{model}}.log",
    benchmark:
        f"{R}/timing/machine/{{env}}/forensics/{{model}}.tsv"
    threads: S.machine.threads_of
    resources:
        mem_mb=RES["forensics"]["mem_mb"],
        runtime=RES["forensics"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus --cpu-kind {params.kind:q} forensics --model-path {params.model:q} --prompts {input.prompts:q}"
        " --decoded {input.decoded:q} --reference {input.ref:q} --rounding-ulps {params.rounding_ulps:q}"
        " --device {params.device:q} --threads {params.threads:q} --out {output:q} > {log:q} 2>&1"


rule machine_forensics_all:
    input:
        lambda w: [f"{R}/machine/{w.env}/forensics/{m}.parquet" for m in S.machine.forensics_models()],
    output:
        f"{R}/machine/{{env}}/forensics.parquet",
    log:
        f"{R}/logs/machine/{{env}}/forensics/all.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus gather {input:q} --out {output:q} > {log:q} 2>&1"


rule machine_analyze:
    """An environment's tables from machine.cells alone, each environment's alike: an extra one's from its own
    decodings, perplexity and forensics, the study's own from its files of those cells."""
    input:
        unpack(S.machine.analyze_input),
    output:
        [f"{R}/machine/{{env}}/tables/{t}" for t in TABLE_FILES],
    params:
        out=lambda w, output: os.path.dirname(output[0]),
        reference=TEACHER,
        near_tie=config["analysis"]["near_tie"],
        rounding_ulps=ROUNDING_ULPS,
        world=["--world-domains"] if config["prompts"]["source"] == "tiny" else [],
    log:
        f"{R}/logs/machine/{{env}}/analyze.log",
    benchmark:
        f"{R}/timing/machine/{{env}}/analyze.tsv"
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus analyze --decode {input.decode:q} --reference {params.reference:q} --ppl {input.ppl:q}"
        " --forensics {input.forensics:q} {params.world:q} --near-tie {params.near_tie:q}"
        " --rounding-ulps {params.rounding_ulps:q} --out-dir {params.out:q} > {log:q} 2>&1"


rule machine_claims:
    """An environment's claims on its tables, with the study's settings."""
    input:
        lambda w: [f"{S.machine.tables_dir(w.env)}/{t}" for t in TABLE_FILES if t.endswith(".csv")],
    output:
        f"{R}/machine/{{env}}/claims.csv",
    params:
        tables=lambda w, input: os.path.dirname(input[0]),
        settings=S.machine.claims_args(),
    log:
        f"{R}/logs/machine/{{env}}/claims.log",
    benchmark:
        f"{R}/timing/machine/{{env}}/claims.tsv"
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus claims --tables {params.tables:q} {params.settings:q} --out {output:q} > {log:q} 2>&1"


rule machine_compare:
    """Each claim's verdict and each cell's match rate under every environment, and what each one ran."""
    input:
        **S.machine.compare_inputs(),
    output:
        verdicts=report(f"{R}/tables/{contracts.MACHINE_TABLES[0]}", caption="../report/table_verdicts_by_env.rst",
                        category="Tables", subcategory="The machine as an axis"),
        match=report(f"{R}/tables/{contracts.MACHINE_TABLES[1]}", caption="../report/table_match_by_env.rst",
                     category="Tables", subcategory="The machine as an axis"),
        probes=report(f"{R}/tables/{contracts.MACHINE_TABLES[2]}", caption="../report/table_machine_probes.rst",
                      category="Tables", subcategory="The machine as an axis"),
        figure=[report(f"{R}/figures/{contracts.MACHINE_FIGURE}.png", caption="../report/figure_match_by_env.rst",
                       category="Figures", subcategory="The machine as an axis"),
                f"{R}/figures/{contracts.MACHINE_FIGURE}.pdf"],
    params:
        envs=S.machine.compare_args(),
        out=lambda w, output: os.path.dirname(output.verdicts),
        figure=lambda w, output: os.path.splitext(output.figure[0])[0],
    log:
        f"{R}/logs/machine/compare.log",
    benchmark:
        f"{R}/timing/machine/compare.tsv"
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus compare-envs {params.envs:q} --out-dir {params.out:q} --figure {params.figure:q} > {log:q} 2>&1"
