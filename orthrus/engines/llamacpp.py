"""llama.cpp's server as an engine: started on the loopback, sent the exported prompts as token ids,
stopped on every exit path; its answers written as engine trajectory files.

    orthrus engine-run --engine llamacpp --program .llamacpp/bin/llama-server
        --prompts results/export/prompts.jsonl --runs RUNS_JSON

The server is one binary built by `bash envs/build-llamacpp.sh` (CPU only, from the llama.cpp tree
that the registry's llama-cpp-python 0.3.36 source archive vendors); this module drives it with the
standard library (HTTP on the loopback) and writes through orthrus.io. The runs are the vLLM recipe's ([RUN, ...], each RUN {"name",
"out", "model": M.gguf, "speculative": "none" | "ngram" | "draft_model", "k", "draft": DRAFT.gguf,
"seed"}), each run one server: llama.cpp fixes the model and the speculative method when it starts.

Each output line is one record of docs/DESIGN.md's "External trajectory file":
  - `token_ids`: the server's `tokens` (return_tokens), cut after the first of the export's stop ids;
  - `logprobs`: the server's own top-2 log-probabilities at every position (`n_probs: 2`, before
    sampling: a softmax of the raw logits, so a difference of two equals their logits');
  - `forwards`: a plain run's one per token; a speculative run's len(token_ids) - draft_n_accepted
    (every verify forward emits one token of its own plus the drafts it accepted), from the server's
    `timings`; `accepted` is not given (the server reports totals, not steps). The server reports no
    probabilities for the tokens its speculation emits (tools/server/server-context.cpp: "TODO: set
    result.probs"): those positions are empty lists, as are the tokens that end inside a UTF-8
    character, whose entries the server drops (`align_probs`); where a speculative run's entries
    cannot be matched to its tokens at all, the record has no `logprobs` (`extra.probs_aligned`
    false) and its divergences get the reference's verdict alone;
  - `env`: engine, version (the server's `--version`), build (envs/build-llamacpp.sh's build.json:
    the archive's sha256, compiler, CMake flags), the model file's name, size and GGUF file type
    (`weights`; `dtype` the float type a float file computes in, none for a quantized one),
    threads, the speculative method and width, device.
Greedy is `temperature: -1` with `top_k: 1`: the server then samples greedily and still reports the
softmax of the logits (a temperature of 0 reports the one chosen token at probability 1).

On a sampled export (`orthrus export-prompts --sampling`) each run samples instead: n_samples
requests a prompt at the export's temperature, top-k and top-p (min-p off, the chain
temperature -> top-k -> top-p; the prompt's prefill cached across its requests), sample j of prompt i seeded from the run's seed + i and j, written as
a sampled file (docs/DESIGN.md, "Sampled engine file") with env.seed the run's seed + i.

No server outlives its run: it is stopped in a `finally` (SIGTERM, then SIGKILL after 10 s), it
listens on 127.0.0.1 only, and a port taken between choosing it and binding it is retried on another.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from orthrus.engines.server import HOST, Server, ServerError, exit_on_sigterm

SPECULATIVE = ("none", "ngram", "draft_model")
TOP = 2
# the KV cache's type: llama.cpp's default is f16 whatever the weights (an F32 file does not run in fp32)
KV_DEFAULT = "f16"
KV_TYPES = ("f32", "f16", "bf16")
REQUEST_TIMEOUT_S = 600


class LlamaCppError(ServerError):
    """The server could not start, died, or answered something the study cannot use; names which."""


def server_args(run: dict, model: str, port: int, threads: int, ctx: int, slots: int = 1) -> list[str]:
    """The server's command line for one run (the binary excluded); `slots` requests decode at once, each
    with `ctx` tokens of context (llama.cpp divides -c among its slots)."""
    args = ["-m", model, "--host", HOST, "--port", str(port), "-c", str(ctx * slots), "-np", str(slots)]
    args += ["-t", str(threads)]
    args += ["--seed", str(int(run.get("seed", 0))), "--no-webui"]
    kv = run.get("kv_cache") or KV_DEFAULT
    args += ["-ctk", kv, "-ctv", kv]
    method, k = run.get("speculative", "none"), int(run.get("k", 4))
    if method == "ngram":  # prompt lookup: the draft is what followed the last matching n-gram
        args += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", str(k)]
    elif method == "draft_model":
        args += ["--spec-type", "draft-simple", "-md", run["draft"], "--spec-draft-n-max", str(k)]
        args += ["--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-ctkd", kv, "-ctvd", kv]
    elif method != "none":
        raise LlamaCppError(f"run {run.get('name')}: speculative {method!r}, not one of {', '.join(SPECULATIVE)}")
    return args


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{url}/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise LlamaCppError(f"llama-server answered {e.code}: {e.read()[:500]!r}") from None


def greedy_body(prompt: dict) -> dict:
    return {
        "prompt": prompt["prompt_token_ids"],
        "n_predict": prompt["max_new_tokens"],
        "temperature": -1.0,
        "top_k": 1,
        "n_probs": TOP,
        "return_tokens": True,
        "cache_prompt": False,
        "ignore_eos": False,
        "stream": False,
    }


# sampled: the export's settings and nothing else (llama.cpp's default chain adds min-p 0.05, typical
# and DRY), temperature first as transformers and vLLM apply it
SAMPLERS = ["temperature", "top_k", "top_p"]


def sample_body(prompt: dict, seed: int) -> dict:
    return {
        "prompt": prompt["prompt_token_ids"],
        "n_predict": prompt["max_new_tokens"],
        "temperature": prompt["temperature"],
        "top_k": prompt["top_k"] or 0,  # 0: every token
        "top_p": 1.0 if prompt["top_p"] is None else prompt["top_p"],
        "min_p": 0.0,
        "samplers": SAMPLERS,
        "seed": seed,
        "return_tokens": True,
        # a prompt's N samples share its cached prefill (all but the first evaluate only its last token):
        # both arms of a pair alike, and without it a real model re-reads its prompt N times
        "cache_prompt": True,
        "stream": False,
    }


def request_seed(prompt_seed: int, j: int) -> int:
    """Sample j of a prompt: its own seed, a function of the prompt's (env.seed) and j."""
    return (prompt_seed * 100_003 + j) % 2**31


def sampled_record(prompt: dict, url: str, env: dict, prompt_seed: int) -> dict:
    samples = [
        cut_at_stop(
            [int(t) for t in post(url, sample_body(prompt, request_seed(prompt_seed, j))).get("tokens") or []],
            prompt["stop_token_ids"],
        )
        for j in range(prompt["n_samples"])
    ]
    settings = {k: prompt[k] for k in ("temperature", "top_p", "top_k")}
    return {"prompt_id": prompt["prompt_id"], "samples": samples, "env": env | settings | {"seed": prompt_seed}}


def cut_at_stop(ids: list[int], stop: list[int]) -> list[int]:
    """The ids up to and including the first stop id (the server may go on past an id that is not
    its model's end-of-generation token)."""
    for i, t in enumerate(ids):
        if t in stop:
            return ids[: i + 1]
    return ids


def top_logprobs(position: dict) -> list[list]:
    return [[int(t["id"]), float(t["logprob"])] for t in position.get("top_logprobs", [])][:TOP]


def greedy_record(prompt: dict, answer: dict, env: dict, speculative: bool) -> dict:
    every = [int(t) for t in answer.get("tokens") or []]
    ids = cut_at_stop(every, prompt["stop_token_ids"])
    top, aligned = align_probs(every, answer.get("completion_probabilities") or [])
    top = top[: len(ids)]
    timings = answer.get("timings") or {}
    accepted = int(timings.get("draft_n_accepted", 0))
    rec = {
        "prompt_id": prompt["prompt_id"],
        "token_ids": ids,
        "finish_reason": "stop" if ids and ids[-1] in prompt["stop_token_ids"] else "length",
        "prompt_token_ids": prompt["prompt_token_ids"],
        "settings": {k: prompt[k] for k in ("max_new_tokens", "stop_token_ids", "message", "temperature")},
        "env": env,
        "forwards": max(len(ids) - accepted, 1) if speculative else max(len(ids), 1),
        "extra": {"draft_n": int(timings.get("draft_n", 0)), "draft_n_accepted": accepted, "probs_aligned": aligned},
    }
    if aligned:
        rec["logprobs"] = top
    elif not speculative:
        raise LlamaCppError(
            f"prompt {prompt['prompt_id']}: a plain run's probability entries are not its {len(every)} tokens' "
            "(an entry whose id no later token has)"
        )
    return rec


def align_probs(ids: list[int], probs: list[dict]) -> tuple[list[list], bool]:
    """(each token's top-2, or [] where the server gave none; whether every entry found its token).
    The server drops the entry of a token that ends inside a UTF-8 character (tools/server/
    server-context.cpp: `incomplete`), so the entries are a subsequence of the tokens: each is matched
    to the next token of its id. Where a token without an entry sits beside a matched one of the same
    id, which of the two the entry was is ambiguous: both are left empty."""
    out, matched, j = [], [], 0
    for t in ids:
        if j < len(probs) and int(probs[j].get("id", -1)) == t:
            out.append(top_logprobs(probs[j]))
            matched.append(True)
            j += 1
        else:
            out.append([])
            matched.append(False)
    for k, t in enumerate(ids):
        if not matched[k]:
            for n in (k - 1, k + 1):
                if 0 <= n < len(ids) and matched[n] and ids[n] == t:
                    out[n] = []
    return out, j == len(probs)


def gguf_file_type(path: str) -> str:
    """The GGUF's `general.file_type` (F32, BF16, Q4_1, ...), read from its header with the
    standard library (the gguf package is the project's, not needed here); `unknown` if absent."""
    names = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 32: "BF16"}
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
        key = b"general.file_type"
        at = head.index(key) + len(key)
        kind = int.from_bytes(head[at : at + 4], "little")
        if kind == 4:  # uint32
            return names.get(int.from_bytes(head[at + 4 : at + 8], "little"), "other")
    except (OSError, ValueError):
        pass
    return "unknown"


def environment(binary: str, model: str, run: dict, threads: int) -> dict:
    build_json = Path(binary).resolve().parent.parent / "build.json"
    build = json.loads(build_json.read_text()) if build_json.is_file() else {}
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    method = run.get("speculative", "none")
    return {
        "engine": "llama.cpp",
        "version": " ".join((version.stdout + version.stderr).split("\n")[0:1]).strip() or "unknown",
        "build": build,
        "model_file": os.path.basename(model),
        "model_bytes": os.path.getsize(model),
        # the weights' type as the file holds them; dtype the one a float file computes in (ingest checks
        # it against the precision the run is compared at), none for a quantized file
        "weights": gguf_file_type(model),
        "dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}.get(gguf_file_type(model)),
        "kernel": "ggml-cpu",
        "kv_cache": run.get("kv_cache") or KV_DEFAULT,
        "batch_size": 1,
        "threads": threads,
        "device": f"cpu ({platform.processor() or platform.machine()})",
        "speculative": method if method == "none" else f"{method} k={run.get('k', 4)}",
        "logprobs": f"top-{TOP} raw",
    }


def write_jsonl(path: str, records: list[dict]) -> None:
    """Atomically (orthrus.io.atomic_path): a run killed mid-write leaves no file that looks complete."""
    from orthrus.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def serve(binary: str, model: str, run: dict, prompts: list[dict], threads: int, log: str) -> dict:
    """One server for one run: start, decode every prompt, stop; write the file; its timings."""
    longest = max(len(p["prompt_token_ids"]) for p in prompts) + max(p["max_new_tokens"] for p in prompts)
    ctx = max(256, longest + 16)
    t0 = time.perf_counter()
    env = environment(binary, model, run, threads)
    speculative = run.get("speculative", "none") != "none"
    seed = int(run.get("seed", 0))
    with Server(binary, lambda port: server_args(run, model, port, threads, ctx), log) as url:
        started = time.perf_counter()
        if "n_samples" in prompts[0]:  # a sampled export: N samples a prompt, prompt i from seed + i
            env = {k: v for k, v in env.items() if k != "logprobs"} | {"samplers": SAMPLERS}
            records = [sampled_record(p, url, env, seed + i) for i, p in enumerate(prompts)]
        else:
            records = [greedy_record(p, post(url, greedy_body(p)), env, speculative) for p in prompts]
    done = time.perf_counter()
    timing = {"startup_s": round(started - t0, 3), "generate_s": round(done - started, 3)}
    for r in records:
        r["extra"] = r.get("extra", {}) | {"run": run["name"]} | timing
    write_jsonl(run["out"], records)
    return timing


def run_all(server: str, prompts_path: str, runs: list[dict], threads: int) -> None:
    """Every run, one server each, the server's log into this process's stderr. A job killed with
    SIGTERM (Snakemake's way) stops its server on the way out."""
    import signal

    signal.signal(signal.SIGTERM, exit_on_sigterm)
    with open(prompts_path, encoding="utf-8") as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    if not prompts:
        raise LlamaCppError(f"{prompts_path}: no prompts")
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            log = os.path.join(tmp, f"{run['name']}.log")
            try:
                timing = serve(server, run["model"], run, prompts, threads, log)
            finally:
                if os.path.exists(log):  # the server's own log, into the job's
                    sys.stderr.write(Path(log).read_text(errors="replace")[-20000:])
            print(f"[llamacpp] {run['name']}: {len(prompts)} prompts, {timing} -> {run['out']}", file=sys.stderr)
