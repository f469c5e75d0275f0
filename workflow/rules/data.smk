# results/teacher is built by one rule, the one of teacher.source: trained (tiny) or converted (gguf)
if config["teacher"]["source"] == "gguf":

    rule convert_gguf:
        """The teacher from a GGUF file (teacher.gguf), converted once through transformers' GGUF
        loader to a Hugging Face directory with its provenance (orthrus/models/gguf.py)."""
        output:
            directory(f"{R}/teacher"),
        params:
            src=S.models.gguf_args,
        log:
            f"{R}/logs/convert_gguf.log",
        benchmark:
            f"{R}/timing/convert_gguf.tsv"
        threads: config["teacher"]["threads"]
        resources:
            mem_mb=RES["teacher"]["mem_mb"],
            runtime=RES["teacher"]["runtime"],
            gpu=RES["teacher"]["gpus"],
            slurm_extra=RES["teacher"]["slurm_extra"],
        conda:
            ENV
        shell:
            "orthrus convert-gguf {params.src:q} --threads {threads:q} --out {output:q} > {log:q} 2>&1"

else:

    rule train_teacher:
        output:
            directory(f"{R}/teacher"),
        params:
            cfg=lambda w: settings(config["teacher"]["tiny"]),
            seed=config["seed"],
            device=DEVICE,
        log:
            f"{R}/logs/train_teacher.log",
        benchmark:
            f"{R}/timing/train_teacher.tsv"
        threads: config["teacher"]["threads"]
        resources:
            mem_mb=RES["teacher"]["mem_mb"],
            runtime=RES["teacher"]["runtime"],
            gpu=RES["teacher"]["gpus"],
            slurm_extra=RES["teacher"]["slurm_extra"],
        conda:
            ENV
        shell:
            "orthrus train-teacher --config {params.cfg:q} --seed {params.seed:q} --threads {threads:q}"
            " --device {params.device:q} --out {output:q} > {log:q} 2>&1"


rule train_draft:
    """The draft model of the assisted decoder: a smaller tiny teacher on the same world, with
    the teacher's tokenizer (teacher.draft.tiny)."""
    input:
        S.models.teacher_input,
    output:
        directory(f"{R}/draft"),
    params:
        cfg=lambda w: settings(DRAFT.tiny.model_dump()),  # the rule runs only for a tiny draft (its keys as given)
        seed=config["seed"],
        device=DEVICE,
        tokenizer=S.models.teacher_path(),
        weights=lambda w: weights_fingerprint(S.models.teacher_path()),  # new weights inside the directory rerun this (common.smk)
    log:
        f"{R}/logs/train_draft.log",
    benchmark:
        f"{R}/timing/train_draft.tsv"
    threads: DRAFT.threads if DRAFT else 1
    resources:
        mem_mb=RES["teacher"]["mem_mb"],
        runtime=RES["teacher"]["runtime"],
        gpu=RES["teacher"]["gpus"],
        slurm_extra=RES["teacher"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus train-teacher --config {params.cfg:q} --seed {params.seed:q} --threads {threads:q}"
        " --device {params.device:q} --tokenizer {params.tokenizer:q} --out {output:q} > {log:q} 2>&1"


rule prompts:
    output:
        eval=f"{R}/prompts/eval.parquet",
        distill=f"{R}/prompts/distill.parquet",
    params:
        cfg=lambda w: settings(config["prompts"]),
        eval_file=lambda w: S.data.eval_file_fingerprint(),  # a changed local eval file reruns this (common.smk)
        seed=config["seed"],
    log:
        f"{R}/logs/prompts.log",
    resources:
        mem_mb=RES["prompts"]["mem_mb"],
        runtime=RES["prompts"]["runtime"],
        gpu=RES["prompts"]["gpus"],
        slurm_extra=RES["prompts"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus prompts --config {params.cfg:q} --seed {params.seed:q}"
        " --eval-out {output.eval:q} --distill-out {output.distill:q} > {log:q} 2>&1"


rule corpus_shard:
    input:
        S.models.teacher_input,
        # corpus.source hf reads a ready prompt-response dataset: no distillation prompts needed
        prompts=rules.prompts.output.distill if CORPUS_SOURCE == "generate" else [],
    output:
        f"{R}/corpus/shard_{{scatteritem}}.parquet",
    params:
        teacher=S.models.teacher_path(),
        shard=lambda w: scatter_index(w.scatteritem)[0],
        n=lambda w: scatter_index(w.scatteritem)[1],
        c=config["corpus"],
        source=S.data.corpus_source_args,
        device=DEVICE,
        weights=lambda w: weights_fingerprint(S.models.teacher_path()),  # new weights inside the directory rerun this (common.smk)
        data=lambda w: S.data.dataset_fingerprint(),  # a local dataset's files (common.smk)

    log:
        f"{R}/logs/corpus/shard_{{scatteritem}}.log",
    benchmark:
        f"{R}/timing/corpus/shard_{{scatteritem}}.tsv"
    threads: config["threads"]
    priority: 2  # as train's (train.smk): the head of the longest chain
    resources:
        mem_mb=RES["corpus"]["mem_mb"],
        runtime=RES["corpus"]["runtime"],
        gpu=RES["corpus"]["gpus"],
        slurm_extra=RES["corpus"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus corpus --teacher {params.teacher:q} {params.source:q} --message {params.c[message]:q}"
        " --shard {params.shard:q} --num-shards {params.n:q} --batch-size {params.c[batch_size]:q}"
        " --max-new-tokens {params.c[max_new_tokens]:q} --dtype {params.c[precision]:q}"
        " --threads {threads:q} --device {params.device:q} --out {output:q} > {log:q} 2>&1"
