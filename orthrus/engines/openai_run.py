"""An OpenAI engine job (orthrus/engines/openai_engine.py): its servers started (or the user's reached),
probed for what the audit needs, sent the exported prompts at each run's concurrency, and their answers
written as engine trajectory files (docs/DESIGN.md, "External trajectory file") or sampled files.

Runs that share a server (the same command and settings, at other concurrencies) share one start.
A greedy run sends the whole prompt set `repeats` times, each time with `concurrency` requests in
flight; its record per prompt is the first repeat's tokens and top-2 log-probabilities, with every
repeat's tokens in `extra.completions` (the distinct completions per prompt: the Thinking Machines
measure) and the requests in flight when each of its requests started in `extra.in_flight`. A sampled
run sends n_samples requests a prompt, sample j of prompt i seeded from the run's seed + i and j, as
llama.cpp's engine does, all at the run's concurrency. `env` holds what is known of the server's
numerics (orthrus/engines/openai_launch.py) and of the load: api, server, concurrency, slots, repeats,
planted. A record whose token ids the server did not all return (llama.cpp's server leaves out a token
that ends inside a UTF-8 character) ends with finish_reason `token-ids-missing`: an error row of the
study, counted, never guessed at by retokenizing.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path

from orthrus.engines import openai_api as api
from orthrus.engines.llamacpp import request_seed, write_jsonl
from orthrus.engines.openai_launch import launch_for
from orthrus.engines.openai_planted import PlantedProxy
from orthrus.engines.server import Server, ServerError, exit_on_sigterm

# what a run's settings share with the runs that may use its server (all but its name, file and load)
PER_RUN = ("name", "out", "concurrency", "repeats", "planted", "timeout_s")


def server_key(run: dict) -> str:
    shared = {k: v for k, v in run.items() if k not in PER_RUN}
    inner = shared.get("server", {}).get("inner")
    if inner is not None:  # the engine row's own run of the entry names its run and file too
        shared["server"] = shared["server"] | {"inner": {k: v for k, v in inner.items() if k not in PER_RUN}}
    return json.dumps(shared, sort_keys=True)


def record_env(run: dict, known: dict, model: str, fingerprint: str) -> dict:
    method = run.get("speculative", "none")
    return (
        {"engine": "unknown", "version": "unknown", "dtype": None, "device": "unknown (a server the user runs)"}
        | ({"device": f"cpu ({platform.processor() or platform.machine()})"} if run["server"]["kind"] != "url" else {})
        | known
        | {
            "api": api.API,
            "server": run["server"].get("launch") or run["server"]["kind"],
            **({"url": run["server"]["url"]} if run["server"]["kind"] == "url" else {}),
            "model": model,
            "fingerprint": fingerprint,
            "concurrency": run["concurrency"],
            "slots": run["slots"],
            "repeats": run["repeats"],
            "planted": bool(run.get("planted")),
            "speculative": method if method == "none" else f"{method} k={run.get('k', 4)}",
            "logprobs": f"top-{api.TOP} as served",
        }
    )


def _passes(url: str, bodies: list[dict], run: dict, deadline: float) -> list[list[tuple[dict, int]]]:
    return [api.send_all(url, bodies, run["concurrency"], deadline) for _ in range(run["repeats"])]


def greedy_records(url: str, model: str, run: dict, prompts: list[dict], known: dict, body: dict, deadline: float):
    bodies = [api.greedy_body(p, model, body | run.get("extra_body", {})) for p in prompts]
    passes = _passes(url, bodies, run, deadline)
    env = record_env(run, known, model, str(passes[0][0][0].get("system_fingerprint", "")))
    speculative = run.get("speculative", "none") != "none"
    records = []
    for i, p in enumerate(prompts):
        answer, in_flight = passes[0][i]
        ids, tops = api.parse_choice(answer)
        ids = ids or []
        usage = (answer.get("usage") or {}).get("completion_tokens")
        complete = usage is None or int(usage) == len(ids)
        cut = api.cut_at_stop(ids, p["stop_token_ids"])
        accepted = int((answer.get("timings") or {}).get("draft_n_accepted", 0))
        rec = {
            "prompt_id": p["prompt_id"],
            "token_ids": cut,
            "finish_reason": ("stop" if cut and cut[-1] in p["stop_token_ids"] else "length")
            if complete
            else "token-ids-missing",
            "prompt_token_ids": p["prompt_token_ids"],
            "settings": {k: p[k] for k in ("max_new_tokens", "stop_token_ids", "message", "temperature")},
            "env": env,
            "extra": {
                "completions": [
                    api.cut_at_stop(api.parse_choice(ps[i][0])[0] or [], p["stop_token_ids"]) for ps in passes
                ],
                "in_flight": [ps[i][1] for ps in passes],
            },
        }
        if tops is not None:
            rec["logprobs"] = tops[: len(cut)]
        # tokens per forward where the server counts its drafts (llama.cpp's `timings`); a plain run's
        # one per token; a speculative run without counts has none
        if not speculative:
            rec["forwards"] = max(len(cut), 1)
        elif "draft_n_accepted" in (answer.get("timings") or {}):
            rec["forwards"] = max(len(cut) - accepted, 1)
        records.append(rec)
    return records


def sampled_records(url: str, model: str, run: dict, prompts: list[dict], known: dict, body: dict, deadline: float):
    seed = int(run.get("seed", 0))
    order = [(i, j) for i, p in enumerate(prompts) for j in range(p["n_samples"])]
    bodies = [
        api.sample_body(prompts[i], model, request_seed(seed + i, j), body | run.get("extra_body", {}))
        for i, j in order
    ]
    answers = api.send_all(url, bodies, run["concurrency"], deadline)
    env = record_env(run, known, model, str(answers[0][0].get("system_fingerprint", "")))
    env = {k: v for k, v in env.items() if k not in ("logprobs", "repeats")}
    samples: dict[int, list] = {}
    for (i, _), (answer, _n) in zip(order, answers):
        ids = api.parse_choice(answer)[0]
        if ids is None:
            raise api.Missing(f"the server at {url} returned a sample without its token ids")
        samples.setdefault(i, []).append(api.cut_at_stop(ids, prompts[i]["stop_token_ids"]))
    return [
        {
            "prompt_id": p["prompt_id"],
            "samples": samples[i],
            "env": env | {k: p[k] for k in ("temperature", "top_p", "top_k")} | {"seed": seed + i},
        }
        for i, p in enumerate(prompts)
    ]


def run_group(group: list[dict], prompts: list[dict], threads: int, log: str) -> None:
    """The runs that share one server: start it once (or reach the user's), probe it, run each."""
    first = group[0]
    launch = launch_for(first, threads, prompts)
    sampled = "n_samples" in prompts[0]
    t0 = time.perf_counter()
    if launch is None:
        server = contextlib.nullcontext(first["server"]["url"].rstrip("/"))
    else:
        server = Server(launch.binary, launch.args, log, health=launch.health, env=launch.env, name=launch.name)
    with server as url:
        started = time.perf_counter()
        model = first.get("model") or api.served_model(url)
        body = launch.body if launch else {}
        known = dict(launch.known) if launch else {}
        if launch is not None and launch.version_path:
            known["version"] = api.get(url, launch.version_path).get("version", known.get("version"))
        speculative = first.get("speculative", "none") != "none"
        api.probe(url, model, prompts[0], sampled, body | first.get("extra_body", {}), need_top=not speculative)
        for run in group:
            deadline = time.monotonic() + float(run.get("timeout_s", 3600))
            proxy = PlantedProxy(url) if run.get("planted") else contextlib.nullcontext(url)
            t1 = time.perf_counter()
            with proxy as target:
                make = sampled_records if sampled else greedy_records
                records = make(target, model, run, prompts, known, body, deadline)
            timing = {"startup_s": round(started - t0, 3), "generate_s": round(time.perf_counter() - t1, 3)}
            if isinstance(proxy, PlantedProxy):
                timing["perturbed_requests"] = proxy.perturbed
            for r in records:
                r["extra"] = r.get("extra", {}) | {"run": run["name"]} | timing
            write_jsonl(run["out"], records)
            print(
                f"[openai] {run['name']}: {len(prompts)} prompts at concurrency {run['concurrency']}"
                + ("" if sampled else f" x {run['repeats']}")
                + f", {timing} -> {run['out']}",
                file=sys.stderr,
            )


def run_all(prompts_path: str, runs: list[dict], threads: int) -> None:
    """Every run, grouped by the server it needs; each server's log into this job's stderr. A job
    killed with SIGTERM stops its server on the way out."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    with open(prompts_path, encoding="utf-8") as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    if not prompts:
        raise ServerError(f"{prompts_path}: no prompts")
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(server_key(run), []).append(run)
    with tempfile.TemporaryDirectory() as tmp:
        for n, group in enumerate(groups.values()):
            log = os.path.join(tmp, f"server-{n}.log")
            try:
                run_group(group, prompts, threads, log)
            finally:
                if os.path.exists(log):
                    sys.stderr.write(Path(log).read_text(errors="replace")[-20000:])
