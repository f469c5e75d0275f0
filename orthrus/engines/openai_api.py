"""The completions APIs as the audit speaks them, to any server: prompts sent as token ids (no
retokenizing), greedy requests asking for the top-2 log-probabilities at every position, sampled
requests carrying a seed each, and `concurrency` requests in flight at once. Two dialects (`Dialect`):

  - `openai`: `POST /v1/completions`, the OpenAI-compatible API every server here speaks; llama.cpp's
    server names each position's id (`logprobs.content[i].id`), vLLM's with `return_tokens_as_token_ids`
    (`logprobs.tokens[i]` = "token_id:ID"), which every request asks for;
  - `llamacpp`: llama.cpp's own `POST /completion`, which returns every generated id (`tokens`), where
    its `/v1/completions` leaves out the id of a token that ends inside a UTF-8 character (issue 62: 15 of
    36 SmolLM2 prompts lost). The request is the llama.cpp engine's own (orthrus/engines/llamacpp.py).

An entry's `api` names its dialect; left out, a `launch: llamacpp` server speaks llamacpp-completion, and any
other (a `command` or `url` one) the dialect its `GET /v1/models` says (`detected`): llamacpp-completion where
it says it is llama.cpp's, else openai-completions.

Every answer is read and checked by orthrus/engines/openai_answers.py as it arrives, every exchange
bounded by the run's deadline and retried where transient by orthrus/engines/openai_http.py.

`probe` asks with one short request for what the audit needs (ids back, the top-2 log-probabilities,
seeds honoured) before any prompt is sent, and refuses the server naming what it lacks (`Missing`).
`send_all` keeps `concurrency` requests in flight (a thread each) until every request is answered, the
run stops or its deadline passes; it counts how many were in flight when each one started, so a record
says what load it met.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from orthrus.engines import openai_answers as answers
from orthrus.engines.openai_http import Late, Session, Stopped
from orthrus.engines.server import ServerError

API = "openai-completions"
NATIVE_API = "llamacpp-completion"  # llama.cpp's own /completion
TOP = answers.TOP
GRACE_S = 3.0  # past the deadline, the wait for requests whose connections were cut


class Missing(ServerError):
    """The server lacks something the audit needs (token ids back, log-probabilities, seeds)."""


def greedy_body(prompt: dict, model: str, extra: dict | None = None) -> dict:
    return {
        "model": model,
        "prompt": prompt["prompt_token_ids"],
        "max_tokens": prompt["max_new_tokens"],
        "temperature": 0.0,
        "logprobs": TOP,
        # vLLM's: the export's stop ids (the model's end-of-generation ids) and the ids back; a server
        # that does not know them ignores them, and `cut_at_stop` cuts its answer at the first stop id
        "stop_token_ids": prompt["stop_token_ids"],
        "return_tokens_as_token_ids": True,
        "stream": False,
    } | (extra or {})


def sample_body(prompt: dict, model: str, seed: int, extra: dict | None = None) -> dict:
    return {
        "model": model,
        "prompt": prompt["prompt_token_ids"],
        "max_tokens": prompt["max_new_tokens"],
        "temperature": prompt["temperature"],
        "top_p": 1.0 if prompt["top_p"] is None else prompt["top_p"],
        "top_k": prompt["top_k"] or -1,  # -1: every token (vLLM's; llama.cpp's too, as <= 0)
        "seed": seed,
        "stop_token_ids": prompt["stop_token_ids"],
        "return_tokens_as_token_ids": True,
        "logprobs": 1,  # the ids back (vLLM names them only in its log-probabilities)
        "stream": False,
    } | (extra or {})


def native_greedy_body(prompt: dict, model: str, extra: dict | None = None) -> dict:
    from orthrus.engines import llamacpp

    return llamacpp.greedy_body(prompt) | (extra or {})


def native_sample_body(prompt: dict, model: str, seed: int, extra: dict | None = None) -> dict:
    from orthrus.engines import llamacpp

    return llamacpp.sample_body(prompt, seed) | (extra or {})


@dataclass(frozen=True)
class Dialect:
    """One API: its name in a record's env, its path, its request bodies, its answers' reader and
    where it puts the ids (for the probe's message)."""

    api: str
    path: str
    greedy: Callable
    sample: Callable
    read: Callable
    ids_where: str


OPENAI = Dialect(
    API,
    "/v1/completions",
    greedy_body,
    sample_body,
    answers.read_openai,
    "neither logprobs.content[].id (llama.cpp) nor vLLM's return_tokens_as_token_ids; a llama.cpp server's own"
    " /completion returns every id (the entry's `api: llamacpp-completion`)",
)
NATIVE = Dialect(NATIVE_API, "/completion", native_greedy_body, native_sample_body, answers.read_native, "no `tokens`")
DIALECTS = {d.api: d for d in (OPENAI, NATIVE)}


def listed(session: Session) -> list[dict]:
    """The models the server lists (`GET /v1/models`), those that are objects."""
    data = session.call("GET", "/v1/models", None, "the model list").get("data")
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def served_model(session: Session, models: list[dict]) -> str:
    """The first model the server lists: the one a request names where the entry names none."""
    first = models[0] if models else {}
    if not isinstance(first.get("id"), str) or not first["id"]:
        raise Missing(f"{session.name}/v1/models lists no model: give the entry's `model`")
    return first["id"]


def detected(models: list[dict], model: str, native_owners) -> str:
    """The dialect of a server the audit did not start: llama.cpp's own where the model it serves (else its
    first) is `owned_by` one of `native_owners` (what a server that also answers /completion writes in every
    entry of its list: the engine rows' `openai_owner`), else the OpenAI one."""
    return NATIVE_API if served_entry(models, model).get("owned_by") in native_owners else API


def served_entry(models: list[dict], model: str) -> dict:
    """The /v1/models entry of the model a request names, else the first; {} for an empty list."""
    return next((m for m in models if m.get("id") == model), models[0] if models else {})


# where a server says its build: vLLM's GET /version {version}, llama-server's GET /props {build_info}
VERSION_PATHS = (("/version", "version"), ("/props", "build_info"))


def self_described(session: Session, models: list[dict], model: str, engines_by_owner: dict) -> dict:
    """What a server the audit did not start says of itself, for its record: its engine by the
    `owned_by` of the model it serves (`engines_by_owner`: the engine rows' `openai_owner`), its build
    where one of VERSION_PATHS answers it. Each is optional: a server that answers neither is still
    audited, its record saying `unknown`; the run's bound still holds."""
    owner = served_entry(models, model).get("owned_by")
    out = {"engine": engines_by_owner[owner]} if owner in engines_by_owner else {}
    for path, field in VERSION_PATHS:
        try:
            said = session.call("GET", path, None, f"its version ({path})").get(field)
        except (Late, Stopped):
            raise
        except ServerError:
            continue  # not this server's path (404), or not JSON there
        if isinstance(said, str) and said.strip():
            return out | {"version": said.strip()[:200]}
    return out


def cut_at_stop(ids: list[int], stop: list[int]) -> list[int]:
    """The ids up to and including the first stop id."""
    for i, t in enumerate(ids):
        if t in stop:
            return ids[: i + 1]
    return ids


def ask(session: Session, dialect: Dialect, body: dict, asked: answers.Asked) -> answers.Choice:
    return dialect.read(session.call("POST", dialect.path, body, asked.label), asked)


def probe(
    session: Session,
    dialect: Dialect,
    model: str,
    prompt: dict,
    sampled: bool,
    extra: dict | None = None,
    need_top: bool = True,
    vocab: int | None = None,
) -> None:
    """One short request for each thing the audit needs of the server; `Missing` names what it lacks.
    `need_top=False` (a speculative run): llama-server gives no probabilities for the tokens its
    speculation emits, for some prompts none at all, and those divergences are judged by the
    reference's numbers alone, as the llama.cpp engine's are."""
    short = prompt | {"max_new_tokens": 4}
    asked = answers.Asked(session.name, f"the check request (prompt {prompt['prompt_id']}, 4 tokens)", vocab, 4)
    choice = ask(session, dialect, dialect.greedy(short, model, extra), asked)
    where = f"the server at {session.name} (model {model!r})"
    if choice.ids is None:
        raise Missing(f"{where} returns no token ids: {dialect.ids_where}; the audit compares tokens, not text")
    # a plain run's answer lists the top two at its positions; at one whose token ends inside a UTF-8
    # character llama-server's /completion lists none (that token's entry is dropped), so any position
    if not sampled and need_top and not any(len(top) >= TOP for top in choice.tops or []):
        raise Missing(
            f"{where} returns no top-{TOP} log-probabilities (`logprobs: {TOP}`): the verdicts are read from them"
        )
    if sampled:
        s = short | {"max_new_tokens": 16, "temperature": 1.0, "top_p": None, "top_k": 0}
        asked = answers.Asked(session.name, f"the seed check (prompt {prompt['prompt_id']}, 16 tokens)", vocab, 16)
        first = [ask(session, dialect, dialect.sample(s, model, seed, extra), asked).ids for seed in (1, 1)]
        if first[0] != first[1]:
            raise Missing(f"{where} does not honour a request's `seed`: one seed sampled {first[0]} and {first[1]}")


class Load:
    """How many requests are in flight: each request's count when it started."""

    def __init__(self):
        self.lock, self.now = threading.Lock(), 0

    def enter(self) -> int:
        with self.lock:
            self.now += 1
            return self.now

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def send_all(
    session: Session, path: str, bodies: list[dict], labels: list[str], concurrency: int, read: Callable
) -> list[tuple]:
    """Every body posted to `path` with `concurrency` in flight, each answer read as it comes
    (`read(i, answer)`, which raises on a bad one; `labels[i]` names request i in errors): [(what it
    read, requests in flight when it started)] in the bodies' order. The first failure stops the rest
    (their connections cut); the session's deadline cuts everything still open."""
    load, todo, results, errors = Load(), queue.SimpleQueue(), [None] * len(bodies), []
    for i in range(len(bodies)):
        todo.put(i)

    def worker() -> None:
        while not session.over.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            n = load.enter()
            try:
                results[i] = read(i, session.call("POST", path, bodies[i], labels[i])), n
            except Exception as e:  # the first failure stops the rest; it is raised below
                errors.append(e)
                session.stop()
            finally:
                load.leave()

    # daemon threads, not a pool: a job stopped by a signal must not wait at exit for requests in flight
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(concurrency, len(bodies)))]
    for t in threads:
        t.start()
    # the deadline's cut ends every request within moments; GRACE_S past it, the job goes on without
    # them (daemon threads, their sockets shut) rather than wait
    give_up = session.deadline + GRACE_S
    for t in threads:
        while t.is_alive() and time.monotonic() < give_up:
            t.join(0.2)
    if errors:
        raise next((e for e in errors if not isinstance(e, Stopped)), errors[0])
    unanswered = sum(r is None for r in results)
    if unanswered:
        alive = sum(t.is_alive() for t in threads)
        raise session.late(f"{unanswered} of {len(bodies)} requests to be answered ({alive} in flight)")
    return results
