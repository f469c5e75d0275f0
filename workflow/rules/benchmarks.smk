rule benchmark_tasks:
    input:
        prompts=[rules.prompts.output.eval, rules.prompts.output.distill],
    output:
        directory(f"{R}/benchmarks/tasks"),
    params:
        n=BENCH.get("n_docs", 40),
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
        "orthrus lm-eval prepare-data --out {output} --n {params.n} --seed {params.seed}"
        " --exclude {input.prompts} > {log} 2>&1"


rule lm_eval:
    input:
        bench_model_input,
        tasks=rules.benchmark_tasks.output if BENCH.get("tiny_tasks", True) else [],
    output:
        f"{R}/benchmarks/{{model}}/{{decoder}}-{{precision}}-{{attention}}.json",
    params:
        model=bench_model_arg,
        tasks=bench_tasks(),
        include=lambda w, input: f"--include-path {input.tasks}" if input.tasks else "",
        limit=f"--limit {BENCH['limit']}" if BENCH.get("limit") else "",
        code=" --allow-code-eval" if BENCH.get("allow_code_eval") else "",
        # null: each task's own generation length, as the authors ran lm-eval
        max_gen=BENCH.get("max_gen_toks", 128) or "task",
        chat="" if BENCH.get("chat_template", True) else " --no-chat-template",
        device=config["decode"].get("device", "cpu"),
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
        "orthrus lm-eval run --model-path {params.model} --model-name {wildcards.model}"
        " --decoding {wildcards.decoder} --precision {wildcards.precision} --attention {wildcards.attention}"
        " --tasks {params.tasks} {params.include} {params.limit} {params.code} --max-gen-toks {params.max_gen}{params.chat}"
        " --device {params.device} --threads {threads} --out {output} > {log} 2>&1"


rule benchmarks_table:
    input:
        bench_files(),
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
        "orthrus lm-eval table --inputs {input} --out {output.csv} --agreement-out {output.agreement}"
        " --figure {params.figure} --reference {params.reference} > {log} 2>&1"
