rule train:
    input:
        S.models.teacher_input,
        corpus=corpus_shards(),
        eval=rules.prompts.output.eval,
    output:
        directory(f"{R}/models/{{model}}"),
    params:
        teacher=S.models.teacher_path(),
        weights=lambda w: weights_fingerprint(S.models.teacher_path()),  # new weights inside the directory rerun this (common.smk)
        # the variant's own settings (a variant written without any is null in the config), its seed
        # offset by the global one: `--config seed=N` gives another distillation too
        cfg=lambda w: settings(S.models.variant_settings(w.model)),
        # more than one GPU: data parallel, one process per GPU
        launch=lambda w, resources: launcher(resources.gpu),
        device=DEVICE,
    log:
        f"{R}/logs/train/{{model}}.log",
    benchmark:
        f"{R}/timing/train/{{model}}.tsv"
    threads: config["threads"]
    # corpus -> train -> decode -> forensics is the longest chain: start it before the teacher's own
    # decodes (Snakemake does not pass priorities upstream, so corpus_shard has the same), or a
    # small run ends with one core idle waiting for it
    priority: 2
    resources:
        mem_mb=RES["train"]["mem_mb"],
        runtime=RES["train"]["runtime"],
        gpu=RES["train"]["gpus"],
        slurm_extra=RES["train"]["slurm_extra"],
    conda:
        ENV
    shell:
        "{params.launch} train --teacher {params.teacher:q} --corpus {input.corpus:q} --config {params.cfg:q}"
        " --eval-prompts {input.eval:q} --threads {threads:q} --device {params.device:q} --no-progress"
        " --out {output:q} > {log:q} 2>&1"
