"""The settings of an `engine: openai` entry (decode.engines and sampling.engines alike): which server,
at which load (orthrus/engines/openai_engine.py). No defaults here: the engine fills them in, so an
entry of another engine stays as it was written."""

from __future__ import annotations

from orthrus.engines.openai_engine import launchers
from orthrus.plan.settings.keys import array, choices, key


def openai_keys(sampled: bool) -> dict:
    concurrency = (
        key(int, description="openai: requests in flight at once while sampling (left out, 1).", minimum=1, maximum=256)
        if sampled
        else array(
            key(int, minimum=1, maximum=256),
            description=(
                "openai: the loads to audit, requests in flight at once (left out, [1]); must include 1. Each "
                "value is a run NAME-cC, compared with NAME-c1 (C > 1) or the entry's reference (C = 1)."
            ),
            minItems=1,
        )
    )
    keys = {
        "launch": choices(
            list(launchers()),
            description=(
                "openai: the server the workflow starts on the loopback: llamacpp (engines.llamacpp_server, "
                "serving `gguf`) or vllm (vLLM's OpenAI server in engines.vllm_python). One of launch, command, url."
            ),
        ),
        "command": array(
            key(str, minLength=1),
            description=(
                "openai: any server's command line, started by the workflow; {host}, {port}, {model} (the "
                "teacher's directory), {slots} and {threads} in its arguments are filled in; it must answer "
                "GET /v1/models once it serves. One of launch, command, url."
            ),
            minItems=1,
        ),
        "url": key(
            str,
            description=(
                "openai: the base URL of a server the user already runs (http://HOST:PORT): nothing starts, "
                "and the URL alone names it. One of launch, command, url."
            ),
            minLength=1,
        ),
        "model": key(
            str,
            description="openai: the model name requests give (left out, the server's first in /v1/models).",
            minLength=1,
        ),
        "concurrency": concurrency,
        "repeats": key(
            int,
            description=(
                "openai: how many times each concurrency decodes the prompt set (left out, 3): the distinct "
                "completions per prompt are counted across them."
            ),
            minimum=1,
            maximum=100,
        ),
        "slots": key(
            int,
            description=(
                "openai, launched: requests the server decodes at once (llama.cpp's -np, vLLM's --max-num-seqs); "
                "left out, the concurrency for llamacpp (a start per concurrency) and the largest for vllm and "
                "command (one start)."
            ),
            minimum=1,
            maximum=256,
        ),
        "planted": key(
            bool,
            description=(
                "openai: the planted control: a proxy samples a greedy request at temperature 1 while another "
                "request is in flight (orthrus/engines/openai_planted.py); the audit must flag it."
            ),
        ),
        "server_args": array(key(str), description="openai, launched: arguments appended to the server's command."),
        "extra_body": key(
            dict, description="openai: fields merged into every request's body (a server's own options)."
        ),
        "timeout_s": key(
            int, description="openai: the bound on one run's requests, in seconds (left out, 3600).", minimum=1
        ),
    }
    # a sampled run decodes its samples once, and the planted proxy perturbs greedy requests only
    return {k: v for k, v in keys.items() if not (sampled and k in ("repeats", "planted"))}
