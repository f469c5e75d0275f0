"""The zoo's driver for any OpenAI-compatible server (the contract: orthrus/zoo/drivers/__init__.py).

    <release python> orthrus/zoo/drivers/openai_server.py SPEC.json OUT.jsonl

A server's speculative decoding (vLLM's `vllm serve --speculative-config`, llama.cpp's `llama-server
--model-draft`) is only reachable through its API, so the release is driven as its users drive it:
per arm, the driver starts the arm's server command from the release's own environment, waits for it
to answer, sends one `POST /v1/completions` per prompt and sample with the prompt as token ids (no
tokenizer involved), reads the new token ids back, and stops the server with every process it
spawned. Standalone: the standard library only (this file runs under the release's Python).

An arm is data:

    {"server": ["{bin}/vllm", "serve", "{model}", "--host", "{host}", "--port", "{port}",
                "--speculative-config", "{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": 4}"],
     "request": {"ignore_eos": true},     # optional: extra fields of every request
     "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},   # optional: the server's environment variables
     "ready_timeout_s": 300,             # optional: how long the server may take to answer (300)
     "request_timeout_s": 300,           # optional: one request's bound (300)
     "stop_timeout_s": 10}               # optional: SIGTERM's grace before SIGKILL (10)

`server` is the command (a list, no shell), with these placeholders replaced wherever they occur in
an argument (plain text replacement, so JSON braces in an argument stay as they are):
    {host}     127.0.0.1: servers listen on the loopback only
    {port}     a free port on 127.0.0.1, picked by the driver
    {model}    SPEC's model (a Hugging Face directory or a GGUF file)
    {draft}    SPEC's draft model (an error where the case has none)
    {bin}      the release's bin directory (dirname of this Python): the release's own server
    {threads}  SPEC's threads
A command that does not contain both {host} and {port} is refused: the driver must know where the
server listens, and a server left to its default host (vLLM's: every interface) is not on the loopback.
The same placeholders are replaced in `env`'s values.

Every request is the driver's: `prompt` (the ids), `max_tokens` (max_new_tokens), `seed` (SPEC's seed
+ i * samples + s for sample s of prompt i), `logprobs` (2 for the reference arm of a greedy case with `logits: true`, else
1: vLLM names the ids only in its log-probabilities), `return_tokens_as_token_ids: true` (vLLM's;
others ignore it) and `stream: false`; an arm's `request` may not set them (nor `n`, `best_of`,
`echo`). The case's sampling settings are added under the API's names: greedy is `temperature: 0`;
a sampled case sends its temperature, `top_k` (-1: every token), `top_p` (1.0 where unset) and
`min_p: 0` (llama-server's default is 0.05, which the judge's target does not apply). An arm's
`request` is merged last and may change them, and names the model (`model`); without it, the first
model the server lists (`GET /v1/models`) is asked for.

The ids are read in the two dialects the project's OpenAI engine reads: llama.cpp's server
(`choices[0].logprobs.content[i].id`, tops in `top_logprobs: [{id, logprob}]`) and vLLM's
(`choices[0].logprobs.tokens[i]` = "token_id:N", tops in `top_logprobs[i]: {"token_id:N": logprob}`).
Each answer is checked before anything is written (exactly one choice, index 0; every id an integer;
the log-probabilities aligned one per token, finite, at most 0; no more tokens than asked;
`usage.completion_tokens` equal to the ids read: llama-server's `/v1/completions` drops the id of a
token that ends inside a UTF-8 character). A failure exits non-zero with one line on stderr naming the
server, the prompt id, the sample and the field; OUT.jsonl is written to OUT.jsonl.tmp and renamed only
when complete.

`top2` (the reference arm of a greedy case with `logits: true`) holds the server's top-2
log-probabilities per position, [[id, logprob], [id, logprob]] ranked: a difference of two
log-probabilities is the logits' difference (the same normaliser), so the judge's margin reads them
unchanged. Their magnitude is not the logits', though, so a rounding bound in ulps is measured at the
log-probability's scale (the environment line says `"top2": "log-probabilities"`).

The server runs under a keeper: this file again (`--keep`), in a session of its own, which starts the
server in its process group and holds a pipe from the driver. When the driver closes the pipe (after
its arm, on an error, on SIGTERM) or dies (even by SIGKILL, as orthrus.zoo.run kills a driver past its
time), the keeper sends SIGTERM to the whole group, waits `stop_timeout_s` for the server, then
SIGKILLs the group, itself included: nothing the server spawned outlives the driver.

The environment line: the server's own name and version where it tells them (`GET /v1/models`'s
`owned_by`, `GET /version`'s `version` (vLLM's), `GET /props`'s `build_info` (llama-server's)), each
arm's command (with `{port}` left as the placeholder) and extra request fields, the platform and
the driver's Python; `engine` is "llama.cpp" for a server that lists itself as llama.cpp's, with its KV
cache's type (f16 unless a command sets `--cache-type-k`), so the judge rounds as llama.cpp does.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# the answer's reader lies beside this file (a driver runs by path, outside any package)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_answer import (  # noqa: E402
    PROBE_S,
    TOP,
    DriverError,
    Where,
    _short,
    call,
    first_model,
    post,
    read_answer,
    server_info,
    top2,
)

ARMS = ("reference", "speculative")
HOST = "127.0.0.1"
KEEP = "--keep"  # argv[1] of the keeper (this file, run again)
ARM_DEFAULTS = {"request": {}, "env": {}, "ready_timeout_s": 300.0, "request_timeout_s": 300.0, "stop_timeout_s": 10.0}
ARM_KEYS = ("server", *ARM_DEFAULTS)
DRIVER_FIELDS = (
    "prompt",
    "max_tokens",
    "seed",
    "logprobs",
    "return_tokens_as_token_ids",
    "stream",
    "n",
    "best_of",
    "echo",
)
REQUIRED = ("{host}", "{port}")
POLL_S = 0.5  # between readiness probes; the keeper's check of its pipe
SERVER_ENGINES = {"llamacpp": "llama.cpp", "llama.cpp": "llama.cpp", "vllm": "vllm"}  # owned_by -> engine
CACHE_FLAGS = ("--cache-type-k", "-ctk")


class Stopped(Exception):
    """The driver was sent SIGTERM (its job is being stopped): the server goes down with it."""


# ---- the arm, as data


def _positive(name: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise DriverError(f"arms.{name}.{key}: a positive number of seconds, got {value!r}")
    return float(value)


def parse_arm(name: str, arm) -> dict:
    """An arm checked and completed with the defaults; every wrong key named with its path."""
    if not isinstance(arm, dict):
        raise DriverError(f"arms.{name}: an object with `server` (the command), got {arm!r}")
    unknown = sorted(set(arm) - set(ARM_KEYS))
    if unknown:
        raise DriverError(f"arms.{name}.{unknown[0]}: not an arm key (the keys: {', '.join(ARM_KEYS)})")
    server = arm.get("server")
    if not isinstance(server, list) or not server or not all(isinstance(a, str) for a in server):
        raise DriverError(f"arms.{name}.server: the command as a list of strings, got {server!r}")
    for placeholder in REQUIRED:
        if not any(placeholder in a for a in server):
            raise DriverError(f"arms.{name}.server: no {placeholder} (the server must listen where the driver says)")
    out = ARM_DEFAULTS | arm
    for key in ("request", "env"):
        if not isinstance(out[key], dict):
            raise DriverError(f"arms.{name}.{key}: an object, got {out[key]!r}")
    fixed = sorted(set(out["request"]) & set(DRIVER_FIELDS))
    if fixed:
        raise DriverError(
            f"arms.{name}.request.{fixed[0]}: set by the driver (prompt ids, max_new_tokens, seed + sample)"
        )
    if not all(isinstance(v, str) for v in out["env"].values()):
        raise DriverError(f"arms.{name}.env: every value a string")
    for key in ("ready_timeout_s", "request_timeout_s", "stop_timeout_s"):
        out[key] = _positive(name, key, out[key])
    return out


def free_port() -> int:
    """A port nothing on 127.0.0.1 holds now (the kernel's pick; the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def placeholders(spec: dict, port: int | str) -> dict[str, str]:
    return {
        "{host}": HOST,
        "{port}": str(port),
        "{model}": str(spec["model"]),
        "{draft}": "" if spec.get("draft") is None else str(spec["draft"]),
        "{bin}": os.path.dirname(sys.executable),
        "{threads}": str(spec.get("threads", 1)),
    }


def substitute(name: str, key: str, text: str, values: dict[str, str]) -> str:
    """`text` with every placeholder replaced (plain text: JSON braces in an argument stay)."""
    if "{draft}" in text and not values["{draft}"]:
        raise DriverError(f"arms.{name}.{key}: names {{draft}} but the case has no draft model (draft: true)")
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def command(spec: dict, name: str, arm: dict, port: int | str) -> list[str]:
    values = placeholders(spec, port)
    return [substitute(name, "server", a, values) for a in arm["server"]]


def server_env(spec: dict, name: str, arm: dict) -> dict[str, str]:
    values = placeholders(spec, "")
    return {k: substitute(name, f"env.{k}", v, values) for k, v in arm["env"].items()}


# ---- the keeper: the server's process group, taken down whenever the driver lets go


def watch(server: subprocess.Popen) -> None:
    """Until the server exits or the driver's pipe (stdin) closes: bounded by the driver's own life."""
    while server.poll() is None:
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready and not os.read(0, 4096):
            return


def end_group(server: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the group (the keeper ignoring it), `grace` for the server, then SIGKILL to all."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.stdout.flush()
    os.killpg(0, signal.SIGKILL)  # the keeper goes too: it is the group's leader


def keep(argv: list[str]) -> int:
    """The keeper's main: argv is [grace, *command]. Started in a session of its own by the driver,
    so orthrus.zoo.run's kill of the driver's group does not reach it: the closed pipe does."""
    grace, cmd = float(argv[0]), argv[1:]
    server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)  # the keeper's group; output to the log
    watch(server)
    if server.returncode is not None:
        print(f"openai_server keeper: the server exited with code {server.returncode}", flush=True)
    end_group(server, grace)
    return 0  # not reached: SIGKILL


class Server:
    """One arm's server under its keeper; `stop` is safe to call twice and on a failed start."""

    def __init__(self, label: str, argv: list[str], env: dict[str, str], grace: float):
        self.label, self.argv, self.env, self.grace = label, argv, env, grace
        self.keeper: subprocess.Popen | None = None

    def start(self) -> None:
        sys.stdout.flush()
        self.keeper = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), KEEP, repr(self.grace), *self.argv],
            stdin=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # the server's output joins the driver's stdout (the job's log), not
            env=os.environ | self.env,  # its stderr, whose last line is the driver's one-line failure
            start_new_session=True,
        )

    def exited(self) -> bool:
        return self.keeper is None or self.keeper.poll() is not None

    def stop(self) -> None:
        keeper, self.keeper = self.keeper, None
        if keeper is None:
            return
        try:
            keeper.stdin.close()
        except OSError:
            pass
        try:
            keeper.wait(timeout=self.grace + 5)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever is left of the group (a keeper that hung: never expected)
            os.killpg(keeper.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        keeper.wait()


# ---- HTTP


def wait_ready(server: Server, base: str, timeout: float) -> dict:
    """`GET /v1/models` until it answers, the server exits, or `timeout` passes (then an error)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        if server.exited():
            raise DriverError(f"{server.label} exited before it answered (its output is in the driver's log)")
        left = deadline - time.monotonic()
        if left <= 0:
            raise DriverError(
                f"{server.label} did not answer GET /v1/models within ready_timeout_s ({timeout:g} s): {last}"
            )
        try:
            models = call(base + "/v1/models", None, min(PROBE_S, left))
            if isinstance(models, dict):
                return models
            last = f"the model list is {_short(repr(models))}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = _short(f"{type(e).__name__}: {e}")
        time.sleep(max(0.0, min(POLL_S, deadline - time.monotonic())))


# ---- the run


def sampling_fields(spec: dict) -> dict:
    s = spec.get("sampling")
    if not s:
        return {"temperature": 0.0}
    return {
        "temperature": s["temperature"],
        "top_k": s.get("top_k") or -1,
        "top_p": 1.0 if s.get("top_p") is None else s["top_p"],
        "min_p": 0.0,
    }


def request_body(spec: dict, arm: dict, model: str, prompt: dict, seed: int, want_top2: bool) -> dict:
    driver = {
        "model": model,
        "prompt": [int(t) for t in prompt["ids"]],
        "max_tokens": int(spec["max_new_tokens"]),
        "seed": seed,
        "logprobs": TOP if want_top2 else 1,
        "return_tokens_as_token_ids": True,
        "stream": False,
    }
    return driver | sampling_fields(spec) | arm["request"]


def decode_all(spec: dict, name: str, arm: dict, base: str, model: str, label: str, write) -> None:
    greedy = not spec.get("sampling")
    want_top2 = name == "reference" and greedy and bool(spec.get("logits"))
    n = spec.get("samples", 1)
    for i, prompt in enumerate(spec["prompts"]):
        for s in range(n):
            where = Where(label, prompt["id"], s)
            # the contract's seeding: sample s of prompt i with seed + i * samples + s
            body = request_body(spec, arm, model, prompt, int(spec["seed"]) + i * n + s, want_top2)
            ids, tops = read_answer(where, post(base, body, arm["request_timeout_s"], where), spec["max_new_tokens"])
            record = {"arm": name, "prompt_id": prompt["id"], "sample": s, "tokens": ids}
            if want_top2:
                record["top2"] = [top2(where, tops[i], t, greedy, i) for i, t in enumerate(ids)]
            write(record)


def run_arm(spec: dict, name: str, arm: dict, write) -> dict:
    """Start the arm's server, every prompt and sample through it, stop it (always); its info."""
    port = free_port()
    argv = command(spec, name, arm, port)
    label = f"the {name} arm's server ({os.path.basename(argv[0])} at {HOST}:{port})"
    server = Server(label, argv, server_env(spec, name, arm), arm["stop_timeout_s"])
    try:
        server.start()
        base = f"http://{HOST}:{port}"
        models = wait_ready(server, base, arm["ready_timeout_s"])
        model = arm["request"].get("model") or first_model(models, label)
        info = server_info(base, models)
        decode_all(spec, name, arm, base, model, label, write)
        return info
    finally:
        server.stop()


def kv_cache(spec: dict, arms: dict) -> str:
    """llama.cpp's KV cache type as the commands set it (f16: the server's default)."""
    types = set()
    for name, arm in arms.items():
        argv = command(spec, name, arm, "{port}")
        types |= {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in CACHE_FLAGS}
    return "f16" if not types else types.pop() if len(types) == 1 else "per arm"


def environment(spec: dict, arms: dict, infos: dict) -> dict:
    if infos["reference"] != infos["speculative"]:
        raise DriverError(f"the arms' servers report different releases: {infos}")
    info = infos["reference"]
    env = {
        "engine": SERVER_ENGINES.get(str(info["server"]).lower(), info["server"] or "openai-compatible"),
        "driver": "openai_server",
        "api": "openai-completions",
        **info,
        "commands": {name: command(spec, name, arm, "{port}") for name, arm in arms.items()},
        "requests": {name: arm["request"] for name, arm in arms.items()},
        "top2": "log-probabilities",
        "python": platform.python_version(),
        "threads": spec.get("threads"),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    if env["engine"] == "llama.cpp":
        env["kv_cache"] = kv_cache(spec, arms)
    return env


def run(spec: dict, out: Path) -> None:
    """Both arms, then OUT.jsonl.tmp renamed to OUT.jsonl once complete."""
    extra = sorted(set(spec["arms"]) - set(ARMS))
    if extra:
        raise DriverError(f"arms.{extra[0]}: the arms are {', '.join(ARMS)}")
    arms = {name: parse_arm(name, spec["arms"].get(name)) for name in ARMS}
    for name, arm in arms.items():  # a bad placeholder refused before any server starts
        command(spec, name, arm, 0), server_env(spec, name, arm)
    records: list[dict] = []
    infos = {name: run_arm(spec, name, arms[name], records.append) for name in ARMS}
    env = environment(spec, arms, infos)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w") as f:
        for line in [{"environment": env}, *records]:
            f.write(json.dumps(line) + "\n")
    os.replace(tmp, out)


def _terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the driver (the keeper still cleans)
    raise Stopped("stopped by SIGTERM")


def main(argv: list[str]) -> int:
    if argv[:1] == [KEEP]:
        return keep(argv[1:])
    if len(argv) != 2:
        print("usage: openai_server.py SPEC.json OUT.jsonl", file=sys.stderr)
        return 2
    out = Path(argv[1])
    tmp = out.with_name(out.name + ".tmp")
    signal.signal(signal.SIGTERM, _terminated)
    try:
        run(json.loads(Path(argv[0]).read_text()), out)
    except Exception as e:  # the contract: one line naming what failed, and no OUT.jsonl
        print(f"zoo driver (openai_server): {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        return 1
    finally:
        if tmp.exists():
            tmp.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
