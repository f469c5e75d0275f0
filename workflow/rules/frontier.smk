# The price of exactness (frontier.*): one Orthrus model's loop in every setting that could restore
# the AR trajectory, on the same few prompts, timed side by side in one job.


rule frontier:
    input:
        model=S.models.input,
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/frontier/{{model}}.parquet",
    params:
        weights=lambda w: weights_fingerprint(S.models.path(w.model)),  # new weights inside the directory rerun this
        model=lambda w: S.models.path(w.model),
        # the base cell's whole decoding setting (decode.*): the settings vary its precision, kernel and guard
        options=lambda w: cell_options(config["decode"], "orthrus", FRONTIER["base"]["precision"],
                                       FRONTIER["base"]["attention"]),
        per_domain=FRONTIER["prompts_per_domain"],
        precisions=FRONTIER["precisions"],
        attentions=FRONTIER["attentions"],
        guards=FRONTIER["guards"],
        device=DEVICE,
    log:
        f"{R}/logs/frontier/{{model}}.log",
    benchmark:
        f"{R}/timing/frontier/{{model}}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=RES["frontier"]["mem_mb"],
        runtime=RES["frontier"]["runtime"],
        gpu=RES["frontier"]["gpus"],
        slurm_extra=RES["frontier"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus frontier measure --model-path {params.model:q} --model-name {wildcards.model:q}"
        " --prompts {input.prompts:q} --options {params.options:q} --prompts-per-domain {params.per_domain:q}"
        " --precisions {params.precisions:q} --attentions {params.attentions:q} --guards {params.guards:q}"
        " --device {params.device:q} --threads {threads:q} --out {output:q} > {log:q} 2>&1"


rule frontier_table:
    input:
        S.decode.frontier_files(),
    output:
        csv=report(f"{R}/tables/exactness_cost.csv", caption="../report/table_exactness_cost.rst",
                   category="Tables", subcategory="Price of exactness"),
        figure=[report(f"{R}/figures/exactness_cost.png", caption="../report/figure_exactness_cost.rst",
                       category="Figures", subcategory="Price of exactness"), f"{R}/figures/exactness_cost.pdf"],
    params:
        base=[FRONTIER["base"]["precision"], FRONTIER["base"]["attention"]],
        figure=lambda w, output: os.path.splitext(output.figure[0])[0],
    log:
        f"{R}/logs/frontier/table.log",
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus frontier table --inputs {input:q} --base {params.base:q} --out {output.csv:q}"
        " --figure {params.figure:q} > {log:q} 2>&1"
