# One job per decoding cell (model, decoder, precision, attention) and shard: the cells of a model
# run side by side on as many cores or GPUs as there are (S.decode.files() says which cells the study
# asks for: decode.grids narrows them).
rule decode_shard:
    input:
        S.decode.model_input,
        prompts=rules.prompts.output.eval,
        draft=S.decode.draft_input,
        reference=S.decode.reference_input,
    output:
        f"{R}/decode/{{model}}/shards/{{decoder}}-{{precision}}-{{attention}}/{{scatteritem}}.parquet",
    params:
        model=S.decode.model_arg,
        shard=lambda w: scatter_index(w.scatteritem)[0],
        n=lambda w: scatter_index(w.scatteritem)[1],
        device=DEVICE,
        max_error_share=config["decode"]["max_error_share"],
        # the cell's whole decoding setting, as DecodeOptions JSON
        options=lambda w: cell_options(config["decode"], w.decoder, w.precision, w.attention),
        draft=S.decode.draft_args,
        reference=lambda w, input: ["--reference", *input.reference] if input.reference else [],
        subset=lambda w: S.decode.cell_prompts(w.decoder, w.model, w.precision),
        weights=S.decode.weights,
        launch=S.machine.launcher(),  # orthrus under the study's own CPU kind (machine.kinds)
    log:
        f"{R}/logs/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}/{{scatteritem}}.log",
    benchmark:
        f"{R}/timing/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}/{{scatteritem}}.tsv"
    threads: config["threads"]
    priority: 1
    resources:
        mem_mb=RES["decode"]["mem_mb"],
        runtime=RES["decode"]["runtime"],
        gpu=RES["decode"]["gpus"],
        slurm_extra=RES["decode"]["slurm_extra"],
    conda:
        ENV
    shell:
        "{params.launch} decode --model-path {params.model:q} --model-name {wildcards.model:q} --prompts {input.prompts:q}"
        " --options {params.options:q} {params.draft:q} {params.reference:q} {params.subset:q}"
        " --shard {params.shard:q} --num-shards {params.n:q}"
        " --device {params.device:q} --max-error-share {params.max_error_share:q}"
        " --threads {threads:q} --out {output:q} > {log:q} 2>&1"


rule decode:
    input:
        gather.decode(f"{R}/decode/{{{{model}}}}/shards/{{{{decoder}}}}-{{{{precision}}}}-{{{{attention}}}}/{{scatteritem}}.parquet"),
    output:
        f"{R}/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.parquet",
    log:
        f"{R}/logs/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.log",
    localrule: True
    # a second's work that the oracle, forensics and the tables wait for: at the default priority
    # the decode_shard jobs (priority 1) kept it waiting for minutes while those could have run
    priority: 3
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus gather {input:q} --out {output:q} > {log:q} 2>&1"


rule tpf_decode:
    """Table 2 as the authors measured it: a separate Orthrus run at the TPF settings (tpf.*),
    e.g. 256 new tokens and a user-only message; only tpf_by_domain.csv reads it."""
    input:
        model=S.models.input,
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/tpf/{{model}}/orthrus-{{precision}}-{{attention}}.parquet",
    params:
        weights=lambda w: weights_fingerprint(S.models.path(w.model)),  # new weights inside the directory rerun this (common.smk)
        model=lambda w: S.models.path(w.model),
        device=DEVICE,
        max_error_share=config["decode"]["max_error_share"],
        # the decode section's options with tpf's on top (its own max_new_tokens and message)
        options=lambda w: cell_options({**config["decode"], **TPF}, "orthrus", w.precision, w.attention),
        launch=S.machine.launcher(),
    log:
        f"{R}/logs/tpf/{{model}}/orthrus-{{precision}}-{{attention}}.log",
    benchmark:
        f"{R}/timing/tpf/{{model}}/orthrus-{{precision}}-{{attention}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["tpf"]["mem_mb"],
        runtime=RES["tpf"]["runtime"],
        gpu=RES["tpf"]["gpus"],
        slurm_extra=RES["tpf"]["slurm_extra"],
    conda:
        ENV
    shell:
        "{params.launch} decode --model-path {params.model:q} --model-name {wildcards.model:q} --prompts {input.prompts:q}"
        " --options {params.options:q} --device {params.device:q} --max-error-share {params.max_error_share:q}"
        " --threads {threads:q} --out {output:q} > {log:q} 2>&1"
