rule train:
    input:
        teacher_input(),
        corpus=corpus_shards(),
        eval=rules.prompts.output.eval,
    output:
        directory(f"{R}/models/{{model}}"),
    params:
        teacher=teacher_arg,
        cfg=lambda w: settings({"models": {w.model: config["models"][w.model]}}),
    log:
        f"{R}/logs/train/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{model}}.tsv"
    threads: config["threads"]
    conda:
        ENV
    shell:
        "orthrus train --teacher {params.teacher} --corpus {input.corpus} --config {params.cfg:q}"
        " --model {wildcards.model} --eval-prompts {input.eval} --threads {threads} --no-progress"
        " --out {output} > {log} 2>&1"
