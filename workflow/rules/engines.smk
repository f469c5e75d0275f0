# decode.engines: engines the workflow runs itself (orthrus/engines/runner.py). vLLM: the project's recipe
# (orthrus/engines/vllm_recipe.py) in the engine's own environment (engines.vllm_python, built by
# `bash envs/build-vllm.sh`), one job per precision. llama.cpp: its server (engines.llamacpp_server, built by
# `bash envs/build-llamacpp.sh`) started on the loopback for each run (orthrus/engines/llamacpp.py), one job,
# serving GGUF files the gguf_export rule converts with llama.cpp's own converter. transformers: the stand-in
# (orthrus/engines/transformers_engine.py) writing decode.external's entries with `stand_in`, in this
# package's process. Each entry's file is a decode.external entry (the plan adds decode.engines' to its
# external entries), so external.smk ingests it and runs its forensics.
import json

from orthrus.engines.engine import drafts_with
from orthrus.engines.runner import converter, entries as engine_entries_of, job_engine, jobs as engine_jobs, llamacpp_server, runs_spec, serves_gguf

_ENGINE_RULES = set()
_DRAFT = (S.models.draft_path() if DRAFT else None, S.models.draft_files())
for _job, _names in engine_jobs(S.config).items():
    _engine = job_engine(S.config, _names)
    _runs = runs_spec(S.config, _names, R, _DRAFT[0], TEACHER)

    # one job per group its engine forms (vLLM: a process per precision, each run its own engine; llama.cpp:
    # one job, a server a run); the engine says what the job reads and which program runs it
    rule:
        name:
            rule_name(f"engine_{_job.replace('-', '_')}", _ENGINE_RULES)
        input:
            _engine.inputs(_runs, S.models.teacher_input(), _DRAFT),
            prompts=rules.export_prompts.output[0],
        output:
            [r["out"] for r in _runs],
        params:
            engine=_engine.name,
            program=_engine.program(S.config) or "",
            model=_engine.model_path(S.models.teacher_path()),
            weights=lambda w, _runs=_runs: weights_fingerprint(S.models.teacher_path(), *([_DRAFT[0]] if drafts_with(_runs, _DRAFT[0]) else [])),  # new weights inside the directory rerun this
            runs=json.dumps(_runs),
        log:
            f"{R}/logs/engines/{_job}.log",
        threads: config["threads"]
        resources:
            mem_mb=RES["decode"]["mem_mb"],
            runtime=RES["decode"]["runtime"],
            gpu=RES["decode"]["gpus"],
            slurm_extra=RES["decode"]["slurm_extra"],
        conda:
            ENV
        shell:
            "orthrus engine-run --engine {params.engine:q} --program={params.program:q} --model-path={params.model:q}"
            " --prompts {input.prompts:q} --runs {params.runs:q} --threads {threads:q} > {log:q} 2>&1"


if serves_gguf([*engine_entries_of(S.config).values(), *S.sampling.engines().values()]):

    rule gguf_export:
        """The teacher (or teacher.draft) as a GGUF file of one type, by llama.cpp's own converter."""
        input:
            lambda w: S.models.teacher_input() if w.model == TEACHER else S.models.draft_files(),
        output:
            f"{R}/gguf/{{model}}-{{gguf_type}}.gguf",
        wildcard_constraints:
            gguf_type="f32|bf16|f16",
        params:
            path=lambda w: S.models.teacher_path() if w.model == TEACHER else S.models.draft_path(),
            converter=converter(llamacpp_server(S.config) or "."),
        log:
            f"{R}/logs/gguf/{{model}}-{{gguf_type}}.log",
        resources:
            mem_mb=RES["decode"]["mem_mb"],
            runtime=RES["decode"]["runtime"],
        conda:
            ENV
        shell:
            "orthrus gguf-export --model-path {params.path:q} --outtype {wildcards.gguf_type:q}"
            " --converter {params.converter:q} --out {output:q} > {log:q} 2>&1"
