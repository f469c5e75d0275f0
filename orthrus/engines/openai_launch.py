"""The servers the OpenAI engine starts itself (an entry's `launch` or `command`), each as one command on
a loopback port (orthrus/engines/server.py starts, waits for and stops it), and what is known of its
numerical environment before it answers. An entry with `url` is a server the user runs: nothing starts.
`launch: NAME` asks the engine row NAME (orthrus/engines/runner.py's ENGINES) for its `openai_server`,
one of the functions here:

    llamacpp   llama.cpp's server (engines.llamacpp_server) on the entry's GGUF file, with `slots`
               requests decoded at once (-np), each slot the prompts' context
    vllm       vLLM's OpenAI server (vllm_serve.py: `python -m vllm.entrypoints.openai.api_server`
               with the entry's `patches` applied in its engine core) in engines.vllm_python's
               environment on the teacher's directory, `slots` as --max-num-seqs
    command    any program ([PROGRAM, ARG, ...]); {host}, {port}, {model} (the study's model directory),
               {slots} and {threads} in its arguments are filled in; it must serve /v1/models once ready

A launched run's `server` holds the engine row's own run (`inner`, what that engine's `run` makes of the
entry: its model file, draft, KV cache), its program and the model directory the job was handed.

Prompt caching is off in both built-in launches (llama.cpp's `cache_prompt`, vLLM's prefix caching): a
cached prefix is a second way an answer can depend on the requests before it, and the audit measures
the first, the batch a request shares. An entry's `server_args` (appended to the command) and
`extra_body` (merged into every request) turn it, or anything else, back on.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from orthrus.engines import vllm_patches
from orthrus.engines.openai_api import NATIVE_API
from orthrus.engines.server import HOST

# vLLM's own server, started through a file that carries the run's patches into its engine core
VLLM_SERVE = Path(__file__).with_name("vllm_serve.py")
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class Launch:
    """One server command: `binary`, `args(port)`, its environment, the path that answers once it serves,
    what every request adds (`body`), and its numerical environment as far as it is known at start."""

    name: str
    binary: str
    args: object  # (port) -> list[str]
    health: str = "/v1/models"
    env: dict | None = None
    body: dict = field(default_factory=dict)
    known: dict = field(default_factory=dict)
    # the API it is read through (orthrus/engines/openai_api.py's DIALECTS); "": what its /v1/models says
    dialect: str = ""


def context(prompts: list[dict]) -> int:
    """The context a request needs: its longest prompt and budget, with room to spare."""
    longest = max(len(p["prompt_token_ids"]) for p in prompts) + max(p["max_new_tokens"] for p in prompts)
    return max(256, longest + 16)


def llamacpp(run: dict, threads: int, prompts: list[dict]) -> Launch:
    from orthrus.engines import llamacpp as lc

    # the llama.cpp engine's own run of the entry: its GGUF file, draft, KV cache type and speculation
    spec, server, slots, ctx = run["server"]["inner"], run["server"]["program"], run["slots"], context(prompts)
    model = spec["model"]
    known = lc.environment(server, model, spec, threads) | {"batch_size": slots, "slots": slots}
    return Launch(
        "llama-server",
        server,
        lambda port: [*lc.server_args(spec, model, port, threads, ctx, slots), *run.get("server_args", [])],
        health="/health",
        body={"cache_prompt": False},
        known=known,
        # its own /completion returns every id; its /v1/completions drops a token that ends inside a
        # UTF-8 character (issue 62)
        dialect=NATIVE_API,
    )


def vllm_version(python: str, env: dict) -> str:
    try:
        out = subprocess.run(
            [python, "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def vllm(run: dict, threads: int, prompts: list[dict]) -> Launch:
    inner, slots = run["server"]["inner"], run["slots"]
    python, model = run["server"]["program"], run["server"]["model_dir"]
    args = [str(VLLM_SERVE), "--model", model, "--served-model-name", run["model"] or "teacher"]
    args += ["--dtype", VLLM_DTYPES[run["dtype"]], "--seed", str(run.get("seed", 0)), "--max-num-seqs", str(slots)]
    args += ["--max-model-len", str(context(prompts)), "--max-logprobs", "2", "--no-enable-prefix-caching"]
    # eager and an explicit KV cache, as the offline recipe's (orthrus/engines/vllm_recipe.py): vLLM's CPU
    # default compiles at every start and reserves most of the node's memory
    args += [
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(int(float(run["server"].get("kv_cache_gib", 1)) * 2**30)),
    ]
    method, k = run.get("speculative", "none"), int(run.get("k", 4))
    if method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
        args += ["--speculative-config", json.dumps(spec)]
    elif method == "draft_model":
        spec = {"method": "draft_model", "model": inner["draft"], "num_speculative_tokens": k}
        args += ["--speculative-config", json.dumps(spec)]
    # the engine's environment imports its own transformers, never this package's; the run's patches and
    # no others (an inherited ORTHRUS_VLLM_PATCHES would patch a run that names none)
    patches = sorted(inner.get("patches") or [])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {vllm_patches.ENV: ",".join(patches)}
    versions = vllm_version(python, env).split()
    known = {
        "engine": "vllm",
        "version": versions[0] if versions else "unknown",
        "torch": versions[1] if len(versions) > 1 else "unknown",
        "dtype": VLLM_DTYPES[run["dtype"]],
        "kernel": "vllm (its attention selector's; the server does not report it)",
        "batch_size": slots,
        "slots": slots,
        "threads": threads,
        "prefix_caching": False,
        "patches": patches,
    }
    return Launch(
        "vllm serve",
        python,
        lambda port: [*args, "--host", HOST, "--port", str(port), *run.get("server_args", [])],
        env=env,
        known=known,
    )


def command(run: dict, threads: int, prompts: list[dict]) -> Launch:
    argv, model = run["server"]["command"], run["server"].get("model_dir", "")
    fill = {"host": HOST, "model": model, "threads": threads, "slots": run["slots"]}
    return Launch(
        os.path.basename(argv[0]),
        argv[0],
        lambda port: [a.format(port=port, **fill) for a in argv[1:]] + list(run.get("server_args", [])),
        known={"engine": os.path.basename(argv[0]), "command": " ".join(argv), "threads": threads},
    )


def launch_for(run: dict, threads: int, prompts: list[dict], launchers: dict) -> Launch | None:
    """The command that starts the run's server, None for a server the user runs (`url`); `launchers`:
    the engine rows that start one (orthrus/engines/launchers.py, handed in: the rows import this module)."""
    kind = run["server"]["kind"]
    if kind == "url":
        return None
    if kind == "command":
        return command(run, threads, prompts)
    return launchers[run["server"]["launch"]].openai_server(run, threads, prompts)
