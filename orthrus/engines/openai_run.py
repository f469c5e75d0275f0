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
numerics (orthrus/engines/openai_launch.py) and of the load: api (the dialect), server, concurrency,
slots, repeats, planted; `extra.retries` the transient failures the run retried.

Each run has one deadline, its `timeout_s` (the first run's covering the checks before the prompts):
every request, answer and body read within it (orthrus/engines/openai_http.py), and every answer
checked as it comes (orthrus/engines/openai_answers.py). A run that fails either way stops with one
line naming the server, the request and the field or what it waited for; its file is not written.
A record whose token ids the server did not all return (llama.cpp's `/v1/completions` leaves out a
token that ends inside a UTF-8 character; a llama.cpp server, launched or found so by its /v1/models,
is read through its `/completion`, which does not) ends with finish_reason `token-ids-missing`: an
error row of the study, counted (and said on stderr), never guessed at by retokenizing.
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

from orthrus.engines import openai_answers as answers
from orthrus.engines import openai_api as api
from orthrus.engines.launchers import LAUNCHERS
from orthrus.engines.llamacpp import request_seed, write_jsonl
from orthrus.engines.openai_http import Session
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


def record_env(run: dict, known: dict, model: str, fingerprint: str, dialect: api.Dialect) -> dict:
    method = run.get("speculative", "none")
    return (
        {"engine": "unknown", "version": "unknown", "dtype": None, "device": "unknown (a server the user runs)"}
        | ({"device": f"cpu ({platform.processor() or platform.machine()})"} if run["server"]["kind"] != "url" else {})
        | known
        | {
            "api": dialect.api,
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


def reader(session: Session, dialect: api.Dialect, labels: list[str], budgets: list[int], vocab, need_top, greedy):
    """`read(i, answer)` for send_all: answer i checked (orthrus/engines/openai_answers.py), its ids
    there, a plain run's log-probabilities one entry per token, and a greedy run's top two at each
    position where it lists any (a sampled request asks for one)."""

    def read(i: int, answer: dict) -> answers.Choice:
        asked = answers.Asked(session.name, labels[i], vocab, budgets[i])
        choice = dialect.read(answer, asked)
        if choice.ids is None:
            raise asked.bad("token ids", f"none in this answer ({dialect.ids_where}), where the check request had them")
        if need_top and choice.tops is None:
            raise asked.bad("log-probabilities", "none, or not one entry per token, in a plain run's answer")
        short = [k for k, top in enumerate(choice.tops or []) if 0 < len(top) < api.TOP]
        if greedy and short:  # a verdict reads the top two; a position lists them, or none at all
            n = len(choice.tops[short[0]])
            raise asked.bad("top log-probabilities", f"{n} listed, not the {api.TOP} asked for", short[0])
        return choice

    return read


def greedy_records(session: Session, dialect: api.Dialect, model: str, run: dict, prompts: list[dict], known, body):
    bodies = [dialect.greedy(p, model, body | run.get("extra_body", {})) for p in prompts]
    speculative = run.get("speculative", "none") != "none"
    passes = []
    for r in range(run["repeats"]):
        labels = [f"prompt {p['prompt_id']}, repeat {r + 1} of {run['repeats']}" for p in prompts]
        budgets = [p["max_new_tokens"] for p in prompts]
        read = reader(session, dialect, labels, budgets, run.get("vocab"), not speculative, True)
        passes.append(api.send_all(session, dialect.path, bodies, labels, run["concurrency"], read))
    env = record_env(run, known, model, passes[0][0][0].fingerprint, dialect)
    records = []
    for i, p in enumerate(prompts):
        choice, _ = passes[0][i]
        cut = api.cut_at_stop(choice.ids, p["stop_token_ids"])
        rec = {
            "prompt_id": p["prompt_id"],
            "token_ids": cut,
            "finish_reason": ("stop" if cut and cut[-1] in p["stop_token_ids"] else "length")
            if choice.complete
            else "token-ids-missing",
            "prompt_token_ids": p["prompt_token_ids"],
            "settings": {k: p[k] for k in ("max_new_tokens", "stop_token_ids", "message", "temperature")},
            "env": env,
            "extra": {
                "completions": [api.cut_at_stop(ps[i][0].ids, p["stop_token_ids"]) for ps in passes],
                "in_flight": [ps[i][1] for ps in passes],
            },
        }
        if choice.tops is not None:
            rec["logprobs"] = choice.tops[: len(cut)]
        # tokens per forward where the server counts its drafts (llama.cpp's `timings`); a plain run's
        # one per token; a speculative run without counts has none
        if not speculative:
            rec["forwards"] = max(len(cut), 1)
        elif choice.accepted is not None:
            rec["forwards"] = max(len(cut) - choice.accepted, 1)
        records.append(rec)
    return records


def sampled_records(session: Session, dialect: api.Dialect, model: str, run: dict, prompts: list[dict], known, body):
    seed = int(run.get("seed", 0))
    order = [(i, j) for i, p in enumerate(prompts) for j in range(p["n_samples"])]
    bodies = [
        dialect.sample(prompts[i], model, request_seed(seed + i, j), body | run.get("extra_body", {})) for i, j in order
    ]
    labels = [f"prompt {prompts[i]['prompt_id']}, sample {j}" for i, j in order]
    budgets = [prompts[i]["max_new_tokens"] for i, _ in order]
    read = reader(session, dialect, labels, budgets, run.get("vocab"), False, False)
    answers_ = api.send_all(session, dialect.path, bodies, labels, run["concurrency"], read)
    env = record_env(run, known, model, answers_[0][0].fingerprint, dialect)
    env = {k: v for k, v in env.items() if k not in ("logprobs", "repeats")}
    samples: dict[int, list] = {}
    for (i, _), (choice, _n) in zip(order, answers_):
        samples.setdefault(i, []).append(api.cut_at_stop(choice.ids, prompts[i]["stop_token_ids"]))
    return [
        {
            "prompt_id": p["prompt_id"],
            "samples": samples[i],
            "env": env | {k: p[k] for k in ("temperature", "top_p", "top_k")} | {"seed": seed + i},
        }
        for i, p in enumerate(prompts)
    ]


def check(session: Session, first: dict, launch, prompts: list[dict]) -> tuple[str, dict, api.Dialect]:
    """Before any prompt, within the first run's bound: the model's name, the server's version where it
    says it, its dialect (the entry's `api`, the launch's, else what its /v1/models says), and the
    probe of what the audit needs. (model, what is known of the server, dialect)."""
    named = first.get("api") or (launch.dialect if launch else "")
    models = [] if first.get("model") and named else api.listed(session)
    model = first.get("model") or api.served_model(session, models)
    rows = {row.openai_owner: row for row in LAUNCHERS.values() if row.openai_owner}
    owners = {owner for owner, row in rows.items() if row.native_completion}
    dialect = api.DIALECTS[named or api.detected(models, model, owners)]
    known = dict(launch.known) if launch else {}
    if "version" not in known:  # a server the user runs or starts by command: what it says of itself
        known = api.self_described(session, models, model, {o: row.name for o, row in rows.items()}) | known
    body = (launch.body if launch else {}) | first.get("extra_body", {})
    need_top = first.get("speculative", "none") == "none"
    sampled = "n_samples" in prompts[0]
    api.probe(session, dialect, model, prompts[0], sampled, body, need_top=need_top, vocab=first.get("vocab"))
    return model, known, dialect


def _name(url: str, target: str) -> str:
    return url if target == url else f"{url} (through the planted proxy at {target})"


def run_group(group: list[dict], prompts: list[dict], threads: int, log: str) -> None:
    """The runs that share one server: start it once (or reach the user's), check it, run each, each
    within its `timeout_s` (the first's covering the checks); nothing is written for a run that fails."""
    first = group[0]
    launch = launch_for(first, threads, prompts, LAUNCHERS)
    sampled = "n_samples" in prompts[0]
    t0 = time.perf_counter()
    if launch is None:
        server = contextlib.nullcontext(first["server"]["url"].rstrip("/"))
    else:
        server = Server(launch.binary, launch.args, log, health=launch.health, env=launch.env, name=launch.name)
    with server as url:
        started = time.perf_counter()
        body, model, known, dialect, checked = launch.body if launch else {}, None, {}, None, 0
        for run in group:
            timeout_s = float(run.get("timeout_s", 3600))
            deadline = time.monotonic() + timeout_s
            if model is None:
                with Session(url, timeout_s, deadline) as session:
                    model, known, dialect = check(session, first, launch, prompts)
                checked = session.retries
            proxy = PlantedProxy(url) if run.get("planted") else contextlib.nullcontext(url)
            t1 = time.perf_counter()
            with proxy as target, Session(target, timeout_s, deadline, _name(url, target)) as session:
                make = sampled_records if sampled else greedy_records
                records = make(session, dialect, model, run, prompts, known, body)
            timing = {"startup_s": round(started - t0, 3), "generate_s": round(time.perf_counter() - t1, 3)}
            timing["retries"], checked = session.retries + checked, 0  # transient failures retried
            if isinstance(proxy, PlantedProxy):
                timing["perturbed_requests"] = proxy.perturbed
            for r in records:
                r["extra"] = r.get("extra", {}) | {"run": run["name"]} | timing
            write_jsonl(run["out"], records)
            lost = sum(r.get("finish_reason") == "token-ids-missing" for r in records)
            if lost:
                print(
                    f"[openai] {run['name']}: {lost} of {len(records)} answers lack a token's id ({dialect.path}), "
                    "error rows of the study; a llama.cpp server's own /completion returns every id (`api: llamacpp`)",
                    file=sys.stderr,
                )
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
