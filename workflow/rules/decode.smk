rule decode_shard:
    input:
        model_input,
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/decode/{{model}}/shards/{{decoder}}-{{precision}}-{{attention}}/{{scatteritem}}.parquet",
    params:
        model=model_arg,
        shard=lambda w: scatter_index(w.scatteritem)[0],
        n=lambda w: scatter_index(w.scatteritem)[1],
        max_new=config["decode"]["max_new_tokens"],
        device=config["decode"].get("device", "cpu"),
    log:
        f"{R}/logs/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}/{{scatteritem}}.log",
    benchmark:
        f"{R}/timing/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}/{{scatteritem}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["decode"]["mem_mb"],
        runtime=RES["decode"]["runtime"],
        gpu=RES["decode"]["gpus"],
        slurm_extra=RES["decode"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus decode --decoder {wildcards.decoder} --model-path {params.model} --model-name {wildcards.model}"
        " --precision {wildcards.precision} --attention {wildcards.attention} --prompts {input.prompts}"
        " --max-new-tokens {params.max_new} --shard {params.shard} --num-shards {params.n}"
        " --device {params.device} --threads {threads} --out {output} > {log} 2>&1"


rule decode:
    input:
        gather.decode(f"{R}/decode/{{{{model}}}}/shards/{{{{decoder}}}}-{{{{precision}}}}-{{{{attention}}}}/{{scatteritem}}.parquet"),
    output:
        f"{R}/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.parquet",
    log:
        f"{R}/logs/decode/{{model}}/{{decoder}}-{{precision}}-{{attention}}.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus decode --gather {input} --out {output} > {log} 2>&1"
