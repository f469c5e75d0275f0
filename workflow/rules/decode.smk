rule decode_shard:
    input:
        model_input,
        prompts=rules.prompts.output.eval,
    output:
        # every (precision, attention) pair in one job: one start-up, one output each
        expand(
            f"{R}/decode/{{{{model}}}}/shards/{{{{decoder}}}}-{{p}}-{{a}}/{{{{scatteritem}}}}.parquet",
            p=PRECISIONS,
            a=ATTENTIONS,
        ),
    params:
        precisions=PRECISIONS,
        attentions=ATTENTIONS,
        model=model_arg,
        shard=lambda w: scatter_index(w.scatteritem)[0],
        n=lambda w: scatter_index(w.scatteritem)[1],
        max_new=config["decode"]["max_new_tokens"],
        device=config["decode"].get("device", "cpu"),
        max_error_share=config["decode"]["max_error_share"],
    log:
        f"{R}/logs/decode/{{model}}/{{decoder}}/{{scatteritem}}.log",
    benchmark:
        f"{R}/timing/decode/{{model}}/{{decoder}}/{{scatteritem}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["decode"]["mem_mb"],
        runtime=RES["decode"]["runtime"],
        gpu=RES["decode"]["gpus"],
        slurm_extra=RES["decode"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus decode --decoder {wildcards.decoder:q} --model-path {params.model:q} --model-name {wildcards.model:q}"
        " --precision {params.precisions:q} --attention {params.attentions:q} --prompts {input.prompts:q}"
        " --max-new-tokens {params.max_new:q} --shard {params.shard:q} --num-shards {params.n:q}"
        " --device {params.device:q} --max-error-share {params.max_error_share:q} --threads {threads:q}"
        " --out {output:q} > {log:q} 2>&1"


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
        "orthrus gather {input:q} --out {output:q} > {log:q} 2>&1"
