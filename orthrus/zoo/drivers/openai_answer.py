"""An OpenAI-compatible server's answers, asked for and checked before the zoo's server driver records
them (orthrus/zoo/drivers/openai_server.py, which imports this file from beside it): one choice, integer ids
in either dialect (llama-server's ids, vLLM's `token_id:N` strings), log-probabilities finite and
aligned with the ids. Standard library only: it runs inside the release's environment.
"""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.request

VLLM_ID = "token_id:"
TOP = 2
LOGPROB_TOLERANCE = 1e-3  # nats: a server's rounding of log 1
PROBE_S = 5.0  # one readiness or information request's bound


class DriverError(Exception):
    """A spec the driver cannot run, a server that does not answer, or an answer it cannot record."""


def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "..."


class Where:
    """One request, as its failures name it: the server, the prompt id, the sample."""

    def __init__(self, label: str, prompt_id: str, sample: int):
        self.label, self.prompt_id, self.sample = label, prompt_id, sample

    def __str__(self) -> str:
        return f"{self.label}, prompt {self.prompt_id} sample {self.sample}"

    def bad(self, field: str, problem: str, position: int | None = None) -> DriverError:
        at = "" if position is None else f" (position {position})"
        return DriverError(f"{self}: field {field}{at}: {problem}")


def _show(value) -> str:
    try:
        return _short(json.dumps(value), 80)
    except (TypeError, ValueError):
        return _short(repr(value), 80)


def token_id(where: Where, value, field: str, i: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise where.bad(field, f"{_show(value)} is not an integer token id", i)
    return value


def logprob(where: Where, value, field: str, i: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise where.bad(field, f"{_show(value)} is not a finite log-probability", i)
    if value > LOGPROB_TOLERANCE:
        raise where.bad(field, f"{value!r} is above 0 (a probability over 1)", i)
    return float(value)


def vllm_id(where: Where, token, field: str, i: int) -> int:
    digits = token[len(VLLM_ID) :] if isinstance(token, str) and token.startswith(VLLM_ID) else None
    if digits is None or not digits.isascii() or not digits.isdigit():
        raise where.bad(field, f"{_show(token)} is not {VLLM_ID}N with N an integer (return_tokens_as_token_ids)", i)
    return int(digits)


def llama_dialect(where: Where, content) -> tuple[list[int], list[list]]:
    """llama.cpp's server: content[i] = {id, logprob, top_logprobs: [{id, logprob}, ...]}."""
    field = "choices[0].logprobs.content"
    if not isinstance(content, list):
        raise where.bad(field, f"{_show(content)} is not a list")
    ids, tops = [], []
    for i, c in enumerate(content):
        f = f"{field}[{i}]"
        if not isinstance(c, dict) or "id" not in c:
            raise where.bad(f"{f}.id", "absent: the server names no token ids", i)
        ids.append(token_id(where, c["id"], f"{f}.id", i))
        if "logprob" in c:
            logprob(where, c["logprob"], f"{f}.logprob", i)
        listed = c.get("top_logprobs") or []
        if not isinstance(listed, list) or not all(isinstance(x, dict) for x in listed):
            raise where.bad(f"{f}.top_logprobs", f"{_show(listed)} is not a list of objects", i)
        tops.append(
            [
                (
                    token_id(where, x.get("id"), f"{f}.top_logprobs[{k}].id", i),
                    logprob(where, x.get("logprob"), f"{f}.top_logprobs[{k}].logprob", i),
                )
                for k, x in enumerate(listed)
            ]
        )
    return ids, tops


def vllm_dialect(where: Where, lp: dict) -> tuple[list[int], list[list]]:
    """vLLM's: tokens[i] = "token_id:N", token_logprobs[i], top_logprobs[i] = {"token_id:N": logprob}."""
    field = "choices[0].logprobs"
    tokens = lp["tokens"]
    if not isinstance(tokens, list):
        raise where.bad(f"{field}.tokens", f"{_show(tokens)} is not a list")
    ids = [vllm_id(where, t, f"{field}.tokens[{i}]", i) for i, t in enumerate(tokens)]
    for key in ("token_logprobs", "top_logprobs"):
        if lp.get(key) is not None and (not isinstance(lp[key], list) or len(lp[key]) != len(ids)):
            n = len(lp[key]) if isinstance(lp[key], list) else type(lp[key]).__name__
            raise where.bad(f"{field}.{key}", f"{n} entries for {len(ids)} tokens (not aligned)")
    for i, v in enumerate(lp.get("token_logprobs") or []):
        logprob(where, v, f"{field}.token_logprobs[{i}]", i)
    tops = []
    for i, pos in enumerate(lp.get("top_logprobs") or [{}] * len(ids)):
        f = f"{field}.top_logprobs[{i}]"
        if not isinstance(pos, dict):
            raise where.bad(f, f"{_show(pos)} is not an object", i)
        tops.append([(vllm_id(where, t, f, i), logprob(where, v, f"{f}[{t!r}]", i)) for t, v in pos.items()])
    return ids, tops


def check_counts(where: Where, answer: dict, ids: list[int], budget: int) -> None:
    if len(ids) > budget:
        raise where.bad("choices[0].logprobs", f"{len(ids)} tokens, over the request's max_tokens {budget}")
    usage = answer.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n != len(ids)):
        raise where.bad("usage.completion_tokens", f"{_show(n)} tokens generated, {len(ids)} ids given (ids left out)")


def read_answer(where: Where, answer, budget: int) -> tuple[list[int], list[list]]:
    """(the new ids, each position's listed [(id, logprob), ...]) of one checked answer."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or len(choices) != 1:
        n = len(choices) if isinstance(choices, list) else _show(choices)
        raise where.bad("choices", f"{n} choices, not exactly one (one prompt a request)")
    c = choices[0]
    if not isinstance(c, dict):
        raise where.bad("choices[0]", f"{_show(c)} is not an object")
    if "index" in c and (isinstance(c["index"], bool) or c["index"] != 0):
        raise where.bad("choices[0].index", f"{_show(c['index'])}, not 0 (the request's one prompt)")
    lp = c.get("logprobs")
    if not isinstance(lp, dict):
        raise where.bad("choices[0].logprobs", f"{_show(lp)}: the ids are read from the log-probabilities")
    if "content" in lp:
        ids, tops = llama_dialect(where, lp["content"])
    elif "tokens" in lp:
        ids, tops = vllm_dialect(where, lp)
    else:
        raise where.bad("choices[0].logprobs", "neither content[].id (llama.cpp's) nor tokens (vLLM's token_id:N)")
    check_counts(where, answer, ids, budget)
    return ids, tops


def top2(where: Where, listed: list, chosen: int, greedy: bool, i: int) -> list[list]:
    """A position's top-2 [[id, logprob], [id, logprob]], ranked (ties to the lower id); greedy, the
    chosen token must be ranked first (within rounding of log 1), else the lists are misread."""
    field = f"top_logprobs[{i}]"
    if len({t for t, _ in listed}) != len(listed):
        raise where.bad(field, f"lists a token twice: {listed!r}", i)
    if len(listed) < TOP:
        raise where.bad(field, f"{len(listed)} entries, not the top {TOP} asked (logprobs: {TOP})", i)
    ranked = sorted(listed, key=lambda x: (-x[1], x[0]))
    own = [lp for t, lp in ranked if t == chosen]
    if greedy and (not own or own[0] < ranked[0][1] - LOGPROB_TOLERANCE):
        raise where.bad(field, f"the greedy token {chosen} is not ranked first: {ranked[:TOP]!r}", i)
    return [list(x) for x in ranked[:TOP]]


# ---- the exchanges


def call(url: str, body: dict | None, timeout: float):
    """One exchange: the answer's JSON. Raises OSError, http.client.HTTPException or ValueError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def first_model(models: dict, label: str) -> str:
    data = models.get("data")
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    if not isinstance(first.get("id"), str) or not first["id"]:
        raise DriverError(f"{label}: GET /v1/models lists no model (give the arm's request a `model`)")
    return first["id"]


def server_info(base: str, models: dict) -> dict:
    """The server's own name and version, where it tells them (each probe optional)."""
    data = models.get("data")
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    info = {"server": first.get("owned_by"), "version": first.get("version") or models.get("version"), "build": None}
    for path, key, field in (("/version", "version", "version"), ("/props", "build", "build_info")):
        try:
            answer = call(base + path, None, PROBE_S)
        except (OSError, http.client.HTTPException, ValueError):
            continue
        if isinstance(answer, dict) and isinstance(answer.get(field), (str, int, float)):
            info[key] = info[key] or str(answer[field])
    return info


def post(base: str, body: dict, timeout: float, where: Where):
    try:
        return call(base + "/v1/completions", body, timeout)
    except urllib.error.HTTPError as e:
        text = e.read().decode("utf-8", "replace") if e.fp else ""
        raise DriverError(f"{where}: HTTP {e.code}: {_short(text)}") from None
    except ValueError as e:
        raise DriverError(f"{where}: the answer is not JSON ({_short(str(e))})") from None
    except (OSError, http.client.HTTPException) as e:
        raise DriverError(f"{where}: no answer ({_short(f'{type(e).__name__}: {e}')})") from None
