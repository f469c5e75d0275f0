rule benchmark_tasks:
    input:
        prompts=[rules.prompts.output.eval, rules.prompts.output.distill],
    output:
        directory(f"{R}/benchmarks/tasks"),
    params:
        n=S.benchmarks.docs(),
        tasks=S.benchmarks.tasks(),
        seed=config["seed"],
    log:
        f"{R}/logs/benchmarks/tasks.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus lm-eval prepare-data --out {output:q} --n {params.n:q} --tasks {params.tasks:q} --seed {params.seed:q}"
        " --exclude {input.prompts:q} > {log:q} 2>&1"


rule lm_eval:
    input:
        S.models.input,
        tasks=rules.benchmark_tasks.output if BENCH["tiny_tasks"] else [],
    output:
        f"{R}/benchmarks/{{model}}/{{decoder}}-{{precision}}-{{attention}}.json",
    params:
        model=lambda w: S.models.path(w.model),
        weights=lambda w: weights_fingerprint(S.models.path(w.model)),  # new weights inside the directory rerun this (common.smk)
        tasks=S.benchmarks.tasks(),
        # optional flags as lists of arguments, each quoted on its own
        include=lambda w, input: [a for d in ([input.tasks] if input.tasks else []) + BENCH["include_paths"]
                                  for a in ("--include-path", d)],
        limit=["--limit", BENCH["limit"]] if BENCH["limit"] else [],
        code=["--allow-code-eval"] if BENCH["allow_code_eval"] else [],
        # null: each task's own generation length, as the authors ran lm-eval
        max_gen=BENCH["max_gen_toks"] or "task",
        chat=[] if BENCH["chat_template"] else ["--no-chat-template"],
        # the decode stage's loop options, so Table 7 runs the loop the trajectory study ran
        options=lambda w: cell_options(config["decode"], w.decoder, w.precision, w.attention),
        device=DEVICE,
        seed=config["seed"],
    log:
        f"{R}/logs/benchmarks/{{model}}/{{decoder}}-{{precision}}-{{attention}}.log",
    benchmark:
        f"{R}/timing/lm_eval/{{model}}/{{decoder}}-{{precision}}-{{attention}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["lm_eval"]["mem_mb"],
        runtime=RES["lm_eval"]["runtime"],
        gpu=RES["lm_eval"]["gpus"],
        slurm_extra=RES["lm_eval"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus lm-eval run --model-path {params.model:q} --model-name {wildcards.model:q}"
        " --options {params.options:q}"
        " --tasks {params.tasks:q} {params.include:q} {params.limit:q} {params.code:q} --max-gen-toks {params.max_gen:q}"
        " {params.chat:q} --device {params.device:q} --seed {params.seed:q} --threads {threads:q} --out {output:q} > {log:q} 2>&1"


rule benchmarks_table:
    input:
        S.benchmarks.files(),
    output:
        csv=report(f"{R}/tables/benchmarks.csv", caption="../report/table_benchmarks.rst", category="Tables",
                   subcategory="Benchmarks"),
        agreement=report(f"{R}/tables/benchmarks_agreement.csv", caption="../report/table_benchmarks_agreement.rst",
                         category="Tables", subcategory="Benchmarks"),
        figure=[report(f"{R}/figures/benchmarks.png", caption="../report/figure_benchmarks.rst", category="Figures",
                       subcategory="Benchmarks"), f"{R}/figures/benchmarks.pdf"],
    params:
        reference=TEACHER,
        figure=lambda w, output: os.path.splitext(output.figure[0])[0],
    log:
        f"{R}/logs/benchmarks/table.log",
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus lm-eval table --inputs {input:q} --out {output.csv:q} --agreement-out {output.agreement:q}"
        " --figure {params.figure:q} --reference {params.reference:q} > {log:q} 2>&1"
