# One rule per decoding grid (decode_groups): the full grid, each speculative decoder that decode.grids
# narrows, and each Orthrus model it narrows (that model's Orthrus loop and AR view).
for _name, _decoders, _models, _precisions, _attentions in decode_groups():

    rule:
        name:
            _name
        input:
            model_input,
            prompts=rules.prompts.output.eval,
            draft=draft_input,
        output:
            # every (precision, attention) pair in one job: one start-up, one output each
            expand(
                f"{R}/decode/{{{{model}}}}/shards/{{{{decoder}}}}-{{p}}-{{a}}/{{{{scatteritem}}}}.parquet",
                p=_precisions,
                a=_attentions,
            ),
        wildcard_constraints:
            decoder="|".join(_decoders),
            model=_models,
        params:
            precisions=_precisions,
            attentions=_attentions,
            model=model_arg,
            shard=lambda w: scatter_index(w.scatteritem)[0],
            n=lambda w: scatter_index(w.scatteritem)[1],
            max_new=config["decode"]["max_new_tokens"],
            device=config["decode"].get("device", "cpu"),
            max_error_share=config["decode"]["max_error_share"],
            # protocol options away from their defaults, as an argument list (each quoted by :q)
            options=decode_options(config["decode"]),
            speculative=speculative_args,
        log:
            f"{R}/logs/decode/{{model}}/{{decoder}}/{{scatteritem}}.log",
        benchmark:
            f"{R}/timing/decode/{{model}}/{{decoder}}/{{scatteritem}}.tsv"
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
            "orthrus decode --decoder {wildcards.decoder:q} --model-path {params.model:q} --model-name {wildcards.model:q}"
            " --precision {params.precisions:q} --attention {params.attentions:q} --prompts {input.prompts:q}"
            " --max-new-tokens {params.max_new:q} --shard {params.shard:q} --num-shards {params.n:q} {params.options:q}"
            " {params.speculative:q} --device {params.device:q} --max-error-share {params.max_error_share:q}"
            " --threads {threads:q} --out {output:q} > {log:q} 2>&1"


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


rule tpf_decode:
    """Table 2 as the authors measured it: a separate Orthrus run at the TPF settings (tpf.*),
    e.g. 256 new tokens and a user-only message; only tpf_by_domain.csv reads it."""
    input:
        model=orthrus_input,
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/tpf/{{model}}/orthrus-{{precision}}-{{attention}}.parquet",
    params:
        model=lambda w: model_path(w.model),
        max_new=TPF.get("max_new_tokens", 256),
        device=config["decode"].get("device", "cpu"),
        max_error_share=config["decode"]["max_error_share"],
        options=decode_options({**config["decode"], **TPF}),
    log:
        f"{R}/logs/tpf/{{model}}/orthrus-{{precision}}-{{attention}}.log",
    benchmark:
        f"{R}/timing/tpf/{{model}}/orthrus-{{precision}}-{{attention}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["decode"]["mem_mb"],
        runtime=RES["decode"]["runtime"],
        gpu=RES["decode"]["gpus"],
        slurm_extra=RES["decode"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus decode --decoder orthrus --model-path {params.model:q} --model-name {wildcards.model:q}"
        " --precision {wildcards.precision:q} --attention {wildcards.attention:q} --prompts {input.prompts:q}"
        " --max-new-tokens {params.max_new:q} {params.options:q} --device {params.device:q}"
        " --max-error-share {params.max_error_share:q} --threads {threads:q} --out {output:q} > {log:q} 2>&1"
