# Engines outside this package (decode.external): the evaluation set exported for them (an entry with
# `stand_in` is written by engines.smk's rule of the transformers engine), each trajectory file ingested as the decoder `external` under
# its own name (a decoding result like any other: analyze takes it from S.decode.files()), and the
# forensics of its divergences, scored by the teacher alone.


rule export_prompts:
    """The evaluation set as an engine needs it (prompt ids, chat-rendered text and token ids, the
    generation settings): `snakemake results/export/prompts.jsonl`, then docs/EXTERNAL.md."""
    input:
        S.models.teacher_input,
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/export/prompts.jsonl",
    params:
        teacher=S.models.teacher_path(),
        # the study's options, the ones ingest checks the engine's file against: one budget, one message format
        options=cell_options(config["decode"], contracts.EXTERNAL_DECODER, PRECISIONS[0], ATTENTIONS[0]),
    log:
        f"{R}/logs/export_prompts.log",
    localrule: True
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus export-prompts --model-path {params.teacher:q} --prompts {input.prompts:q}"
        " --options {params.options:q} --out {output:q} > {log:q} 2>&1"


# the model wildcard of the external rules: one of the entries' names (none: no file matches)
_EXTERNAL_NAMES = "|".join(re.escape(n) for n in EXTERNAL_TRAJ) or "(?!)"


rule ingest_external:
    """An engine's trajectory file checked against the prompt set and the teacher's tokenizer and written
    as a decoding result (orthrus/engines/ingest.py): errors name the file, the line and the field."""
    input:
        S.models.teacher_input,
        traj=lambda w: EXTERNAL_TRAJ[w.model]["path"],
        prompts=rules.prompts.output.eval,
    output:
        f"{R}/decode/{{model}}/external-{{precision}}-{{attention}}.parquet",
    wildcard_constraints:
        model=_EXTERNAL_NAMES,
    params:
        teacher=S.models.teacher_path(),
        options=lambda w: cell_options(config["decode"], contracts.EXTERNAL_DECODER, w.precision, w.attention),
        # an argument list, each quoted by :q; empty where the entry is compared with the in-process ar-ref
        reference=lambda w: ["--reference", EXTERNAL_TRAJ[w.model]["reference"]] if EXTERNAL_TRAJ[w.model].get("reference") else [],
    log:
        f"{R}/logs/external/{{model}}-{{precision}}-{{attention}}.log",
    localrule: True
    priority: 3  # as the decode gather's (decode.smk): a short job that the audit of its cell waits for
    resources:
        mem_mb=RES["light"]["mem_mb"],
        runtime=RES["light"]["runtime"],
    conda:
        ENV
    shell:
        "orthrus ingest --file {input.traj:q} --name {wildcards.model:q} --prompts {input.prompts:q}"
        " --model-path {params.teacher:q} --options {params.options:q} {params.reference:q} --out {output:q} > {log:q} 2>&1"


rule forensics_external:
    """An engine's first divergences from its reference (the ar-ref of its cell, or its own plain run),
    scored by the teacher: margins, the reference's gap, a verdict from that gap (orthrus/audit/forensics.py)."""
    input:
        S.models.teacher_input,
        prompts=rules.prompts.output.eval,
        decoded=lambda w: S.engines.file(w.model),
        ref=lambda w: S.engines.reference_file(w.model),
    output:
        f"{R}/forensics/external/{{model}}.parquet",
    wildcard_constraints:
        model=_EXTERNAL_NAMES,
    params:
        teacher=S.models.teacher_path(),
        weights=lambda w: weights_fingerprint(S.models.teacher_path()),  # new weights inside the directory rerun this (common.smk)
        device=DEVICE,
        rounding_ulps=ROUNDING_ULPS,
    log:
        f"{R}/logs/forensics/external/{{model}}.log",
    benchmark:
        f"{R}/timing/forensics/external/{{model}}.tsv"
    threads: config["threads"]
    priority: 1  # as forensics' (analysis.smk)
    resources:
        mem_mb=RES["forensics"]["mem_mb"],
        runtime=RES["forensics"]["runtime"],
        gpu=RES["forensics"]["gpus"],
        slurm_extra=RES["forensics"]["slurm_extra"],
    conda:
        ENV
    shell:
        "orthrus forensics --model-path {params.teacher:q} --prompts {input.prompts:q} --decoded {input.decoded:q}"
        " --reference {input.ref:q} --rounding-ulps {params.rounding_ulps:q} --device {params.device:q}"
        " --threads {threads:q} --out {output:q} > {log:q} 2>&1"
