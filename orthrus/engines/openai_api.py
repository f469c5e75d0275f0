"""The OpenAI-compatible completions API (`POST /v1/completions`) as the audit speaks it, to any server:
prompts sent as token ids (no retokenizing), greedy requests asking for the top-2 log-probabilities
at every position, sampled requests carrying a seed each, and `concurrency` requests in flight at once.

What a server must give back, and where each dialect puts it (`parse_choice`):
  - token ids: llama.cpp's server names each position's id (`logprobs.content[i].id`); vLLM's does with
    `return_tokens_as_token_ids` (`logprobs.tokens[i]` = "token_id:ID"), which every request asks for;
  - the top-2 log-probabilities at each position: `content[i].top_logprobs` (llama.cpp) or
    `top_logprobs[i]` (vLLM, keyed as the tokens are);
  - seeds honoured, for sampled requests: two requests with one seed sample the same tokens.
`probe` asks for each with one short request before any prompt is sent, and refuses the server naming
what it lacks (`Missing`): a server that returns text alone cannot be audited token by token.

`send_all` keeps `concurrency` requests in flight (a thread each, the standard library's HTTP client)
until every request is answered, each bounded by REQUEST_TIMEOUT_S and all by the run's deadline; it
counts how many were in flight when each one started, so a record says what load it met.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request

from orthrus.engines.server import ServerError

API = "openai-completions"
TOP = 2
REQUEST_TIMEOUT_S = 600
VLLM_ID = "token_id:"  # vLLM's token strings under return_tokens_as_token_ids


class Missing(ServerError):
    """The server lacks something the audit needs (token ids back, log-probabilities, seeds)."""


def post(url: str, path: str, body: dict, timeout: float = REQUEST_TIMEOUT_S) -> dict:
    req = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ServerError(f"{url}{path} answered {e.code}: {e.read()[:500]!r}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        raise ServerError(f"{url}{path}: no answer ({e})") from None


def get(url: str, path: str, timeout: float = 30) -> dict:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError) as e:
        raise ServerError(f"{url}{path}: no answer ({e})") from None


def served_model(url: str) -> str:
    """The first model the server lists (`GET /v1/models`): the one a request names where the entry
    names none."""
    data = get(url, "/v1/models").get("data") or []
    if not data or not data[0].get("id"):
        raise Missing(f"{url}/v1/models lists no model: give the entry's `model`")
    return str(data[0]["id"])


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


def _vllm_id(token: str) -> int | None:
    return int(token[len(VLLM_ID) :]) if isinstance(token, str) and token.startswith(VLLM_ID) else None


def parse_choice(answer: dict) -> tuple[list[int] | None, list[list] | None]:
    """(the generated token ids, each position's top-2 [[id, logprob], ...] in rank order), None where
    the answer does not give them."""
    choices = answer.get("choices") or [{}]
    lp = choices[0].get("logprobs") or {}
    if isinstance(lp.get("content"), list):  # llama.cpp: one entry per token, ids named
        content = lp["content"]
        if not all(isinstance(c, dict) and "id" in c for c in content):
            return None, None
        ids = [int(c["id"]) for c in content]
        tops = [
            sorted(([int(t["id"]), float(t["logprob"])] for t in c.get("top_logprobs") or []), key=lambda x: -x[1])[
                :TOP
            ]
            for c in content
        ]
        return ids, tops
    tokens = lp.get("tokens")
    if isinstance(tokens, list):  # vLLM with return_tokens_as_token_ids
        ids = [_vllm_id(t) for t in tokens]
        if None in ids:
            return None, None
        tops = []
        for pos in lp.get("top_logprobs") or []:
            found = [[_vllm_id(t), float(v)] for t, v in (pos or {}).items()]
            tops.append(sorted((x for x in found if x[0] is not None), key=lambda x: -x[1])[:TOP])
        return ids, (tops if len(tops) == len(ids) else None)
    return None, None


def cut_at_stop(ids: list[int], stop: list[int]) -> list[int]:
    """The ids up to and including the first stop id."""
    for i, t in enumerate(ids):
        if t in stop:
            return ids[: i + 1]
    return ids


def probe(url: str, model: str, prompt: dict, sampled: bool, extra: dict | None = None, need_top: bool = True) -> None:
    """One short request for each thing the audit needs of the server; `Missing` names what it lacks.
    `need_top=False` (a speculative run): llama-server gives no probabilities for the tokens its
    speculation emits, for some prompts none at all, and those divergences are judged by the
    reference's numbers alone, as the llama.cpp engine's are."""
    short = prompt | {"max_new_tokens": 4}
    ids, tops = parse_choice(post(url, "/v1/completions", greedy_body(short, model, extra)))
    where = f"the server at {url} (model {model!r})"
    if ids is None:
        raise Missing(
            f"{where} returns no token ids: neither logprobs.content[].id (llama.cpp) nor vLLM's "
            "return_tokens_as_token_ids; the audit compares tokens, not text"
        )
    # a plain run's first token is the prefill's argmax, whose top two every server that has them gives
    if not sampled and need_top and (not tops or len(tops[0]) < TOP):
        raise Missing(
            f"{where} returns no top-{TOP} log-probabilities (`logprobs: {TOP}`): the verdicts are read from them"
        )
    if sampled:
        s = short | {"max_new_tokens": 16, "temperature": 1.0, "top_p": None, "top_k": 0}
        first = [parse_choice(post(url, "/v1/completions", sample_body(s, model, seed, extra)))[0] for seed in (1, 1)]
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


def send_all(url: str, bodies: list[dict], concurrency: int, deadline: float) -> list[tuple[dict, int]]:
    """Every body posted with `concurrency` in flight: [(answer, requests in flight when it started)] in
    the bodies' order. A request that fails, or the deadline (time.monotonic()), stops the rest."""
    load, stop = Load(), threading.Event()

    late = "the run's time bound (timeout_s) passed before every request was answered"

    def one(body: dict) -> tuple[dict, int]:
        if stop.is_set():
            raise ServerError("stopped")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerError(late)
        n = load.enter()
        try:
            return post(url, "/v1/completions", body, timeout=min(REQUEST_TIMEOUT_S, left)), n
        except ServerError:
            if time.monotonic() >= deadline:  # cut short by the bound, not the server's failure
                raise ServerError(late) from None
            raise
        finally:
            load.leave()

    # daemon threads, not a pool: a job stopped by a signal must not wait at exit for requests in flight
    # (its server, stopped on the way out, ends them)
    todo, results, errors = queue.SimpleQueue(), [None] * len(bodies), []
    for i in range(len(bodies)):
        todo.put(i)

    def worker() -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = one(bodies[i])
            except Exception as e:  # the first failure stops the rest; it is raised below
                errors.append(e)
                stop.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(concurrency, len(bodies)))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if errors:
        raise next((e for e in errors if str(e) != "stopped"), errors[0])
    return results
