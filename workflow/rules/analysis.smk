rule perplexity:
    input:
        S.models.teacher_input,
        prompts=rules.prompts.output.eval,
        # the reference's trajectories, and the engines' plain runs that engine pairs declare as theirs
        ref=S.analysis.ppl_decoded(),
    output:
        f"{R}/ppl/reference.parquet",
    params:
        teacher=S.models.teacher_path(),
        weights=lambda w: weights_fingerprint(S.models.teacher_path()),  # new weights inside the directory rerun this (common.smk)
        precision=config["analysis"]["ppl_precision"],
        attention=config["analysis"]["ppl_attention"],
        device=DEVICE,
        launch=S.machine.launcher(),
    log:
        f"{R}/logs/perplexity.log",
    benchmark:
        f"{R}/timing/perplexity.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["perplexity"]["mem_mb"],
        runtime=RES["perplexity"]["runtime"],
        gpu=RES["perplexity"]["gpus"],
        slurm_extra=RES["perplexity"]["slurm_extra"],
    conda:
        ENV
    shell:
        "{params.launch} perplexity --teacher {params.teacher:q} --prompts {input.prompts:q} --decode {input.ref:q}"
        " --precision {params.precision:q} --attention {params.attention:q} --device {params.device:q} --threads {threads:q}"
        " --out {output:q} > {log:q} 2>&1"


rule forensics:
    """Each Orthrus model's divergences (with the block replay), and the teacher's speculative
    decoders' and controls' (replayed by generate; see orthrus/audit/forensics.py), each with its verdict."""
    input:
        model=S.models.input,
        prompts=rules.prompts.output.eval,
        decoded=S.analysis.forensics_decoded,
        ref=S.analysis.forensics_reference,
    output:
        f"{R}/forensics/{{model}}.parquet",
    params:
        model=lambda w: S.models.path(w.model),
        weights=lambda w: weights_fingerprint(S.models.path(w.model)),  # new weights inside the directory rerun this (common.smk)
        device=DEVICE,
        rounding_ulps=ROUNDING_ULPS,
        launch=S.machine.launcher(),
    log:
        f"{R}/logs/forensics/{{model}}.log",
    benchmark:
        f"{R}/timing/forensics/{{model}}.tsv"
    threads: config["threads"]
    # the last of the longest chain (the teacher's is the study's longest job after training):
    # ahead of the jobs that only feed tables (lm_eval, sampling, frontier), which fill the gaps
    priority: 1
    resources:
        mem_mb=RES["forensics"]["mem_mb"],
        runtime=RES["forensics"]["runtime"],
        gpu=RES["forensics"]["gpus"],
        slurm_extra=RES["forensics"]["slurm_extra"],
    conda:
        ENV
    shell:
        "{params.launch} forensics --model-path {params.model:q} --prompts {input.prompts:q} --decoded {input.decoded:q}"
        " --reference {input.ref:q} --rounding-ulps {params.rounding_ulps:q} --device {params.device:q}"
        " --threads {threads:q} --out {output:q} > {log:q} 2>&1"


rule forensics_all:
    input:
        S.analysis.forensics_files(),
    output:
        f"{R}/forensics.parquet",
    log:
        f"{R}/logs/forensics/all.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus gather {input:q} --out {output:q} > {log:q} 2>&1"


rule analyze:
    input:
        decode=S.decode.files(),
        tpf=S.decode.tpf_files(),
        ppl=rules.perplexity.output,
        forensics=rules.forensics_all.output,
    output:
        # every CSV table goes into `snakemake --report` with its caption (workflow/report/)
        [report(f"{R}/tables/{t}", caption=f"../report/table_{t[:-4]}.rst", category="Tables", subcategory="Exactness")
         if t.endswith(".csv") else f"{R}/tables/{t}" for t in TABLE_FILES],
    params:
        out=lambda w, output: os.path.dirname(output[0]),
        reference=TEACHER,
        near_tie=config["analysis"]["near_tie"],
        rounding_ulps=ROUNDING_ULPS,
        # an argument list, each quoted by :q; empty without a separate TPF run
        tpf=lambda w, input: ["--tpf-decode", *input.tpf] if input.tpf else [],
        # the tiny world's declared uncertainty per domain describes its own prompts only
        world=["--world-domains"] if config["prompts"]["source"] == "tiny" else [],
    log:
        f"{R}/logs/analyze.log",
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus analyze --decode {input.decode:q} --reference {params.reference:q} --ppl {input.ppl:q}"
        " --forensics {input.forensics:q} {params.tpf:q} {params.world:q} --near-tie {params.near_tie:q}"
        " --rounding-ulps {params.rounding_ulps:q} --out-dir {params.out:q}"
        " > {log:q} 2>&1"


rule figures:
    input:
        rules.analyze.output,
    output:
        [report(f"{R}/figures/{f}.png", caption=f"../report/figure_{f}.rst", category="Figures", subcategory="Exactness")
         for f in FIGURES],
        [f"{R}/figures/{f}.pdf" for f in FIGURES],
    params:
        tables=lambda w, input: os.path.dirname(input[0]),
        out=lambda w, output: os.path.dirname(output[0]),
    log:
        f"{R}/logs/figures.log",
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus figures --tables {params.tables:q} --out-dir {params.out:q} > {log:q} 2>&1"


rule claims:
    """The study's verdict: each claim tested on the tables (orthrus/report/claims.py), the benchmarks' among them
    when they run."""
    input:
        [f"{R}/tables/{t}" for t in TABLE_FILES if t.endswith(".csv")],
        [f"{R}/tables/{t}" for t in BENCHMARK_TABLE_FILES] if config["benchmarks"]["enabled"] else [],
        S.sampling.tables(),
        S.machine.comparison(),  # every environment's verdicts, where the study runs in two or more
    output:
        report(f"{R}/tables/claims.csv", caption="../report/table_claims.rst", category="Claims"),
    params:
        tables=lambda w, input: os.path.dirname(input[0]),
        margin=config["analysis"]["equivalence_margin"],
        alpha=config["analysis"]["alpha"],
        power=settings(config["analysis"]["power"]),
        sampled_power=SAMPLING["two_sample"]["power"],
    log:
        f"{R}/logs/claims.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus claims --tables {params.tables:q} --equivalence-margin {params.margin:q} --alpha {params.alpha:q}"
        " --power {params.power:q} --sampled-power {params.sampled_power:q} --out {output:q} > {log:q} 2>&1"
