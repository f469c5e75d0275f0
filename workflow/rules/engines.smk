# decode.engines: engines the workflow runs itself. The project's vLLM recipe
# (orthrus/engines/vllm_recipe.py) runs in the engine's own environment (engines.vllm_python, built by
# `bash envs/build-vllm.sh`) on the exported prompts; each entry's file is a decode.external entry
# (the plan adds them to its external entries), so external.smk ingests it and runs its forensics.
import json

from orthrus.engines.runner import by_precision, engine_file, entries as engine_entries_of, runs_spec, vllm_python

_ENGINE_RULES = set()
_USES_DRAFT = any(e.get("speculative") == "draft_model" and not e.get("draft") for e in engine_entries_of(config).values())
for _precision, _names in by_precision(config).items():

    # one job, one process, per precision: vLLM and torch are imported once for its runs (each run
    # still starts its own engine: vLLM fixes the dtype and the speculative method at start-up)
    rule:
        name:
            rule_name(f"engine_vllm_{_precision}", _ENGINE_RULES)
        input:
            S.teacher_input,
            # the study's draft (teacher.draft) where a draft_model run proposes with it
            ([S.draft_path()] if DRAFT["source"] == "tiny" else model_files(S.draft_path())) if _USES_DRAFT else [],
            prompts=rules.export_prompts.output[0],
        output:
            [engine_file(R, n) for n in _names],
        params:
            python=vllm_python(config),
            teacher=S.teacher_path(),
            weights=lambda w: weights_fingerprint(S.teacher_path(), *([S.draft_path()] if _USES_DRAFT else [])),  # new weights inside the directory rerun this
            runs=json.dumps(runs_spec(config, _names, R, S.draft_path() if _USES_DRAFT else None)),
        log:
            f"{R}/logs/engines/vllm-{_precision}.log",
        threads: config["threads"]
        resources:
            mem_mb=RES["decode"]["mem_mb"],
            runtime=RES["decode"]["runtime"],
            gpu=RES["decode"]["gpus"],
            slurm_extra=RES["decode"]["slurm_extra"],
        conda:
            ENV
        shell:
            "orthrus engine-run --python {params.python:q} --model-path {params.teacher:q} --prompts {input.prompts:q}"
            " --runs {params.runs:q} > {log:q} 2>&1"
