"""The zoo's OpenAI-compatible server driver (orthrus/zoo/drivers/openai_server.py), end to end through
orthrus.zoo.run.drive against a fake server this file writes: the standard library's http.server on
the port the driver passes, answering greedy tokens from a fixed rule with their log-probabilities."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orthrus.zoo import judge
from orthrus.zoo.cases import ENGINES, Case
from orthrus.zoo.run import DRIVERS, drive

VOCAB = 97
FAKE = r'''
"""A fake OpenAI-compatible server: token t is followed by (3 t + 1) mod VOCAB, with log-probability
-0.1, its runner-up (the rule's + 1) -2.5; `--bug P` emits the runner-up at new position P."""
import argparse, json, os, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

VOCAB = 97
ap = argparse.ArgumentParser()
ap.add_argument("--host"); ap.add_argument("--port", type=int); ap.add_argument("--model")
ap.add_argument("--dialect", default="llama"); ap.add_argument("--bug", type=int, default=-1)
ap.add_argument("--bad", default=""); ap.add_argument("--pids"); ap.add_argument("--requests")
ap.add_argument("--never-ready", action="store_true"); ap.add_argument("--slow", type=float, default=0)
ap.add_argument("--ignore-term", action="store_true")
a = ap.parse_args()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a process it spawned
if a.ignore_term:  # a server deaf to SIGTERM: the driver's stop must end it by SIGKILL
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(a.pids, "a") as f:
    f.write(f"{os.getpid()} {child.pid}\n")


def positions(prompt, n, seed):
    out, last = [], prompt[-1] + seed
    for i in range(n):
        best = (3 * last + 1) % VOCAB
        second = (best + 1) % VOCAB
        token = second if i == a.bug else best
        out.append((token, [(best, -0.1), (second, -2.5)]))
        last = token
    return out


def llama(pos, k):
    content = [{"id": t, "token": "x", "logprob": dict(top)[t],
                "top_logprobs": [{"id": i, "logprob": lp} for i, lp in top[:k]]} for t, top in pos]
    if a.bad == "float-id":
        content[0]["id"] = float(content[0]["id"])
    return {"content": content}


def vllm(pos, k):
    return {"tokens": [f"token_id:{t}" for t, _ in pos], "token_logprobs": [dict(top)[t] for t, top in pos],
            "top_logprobs": [{f"token_id:{i}": lp for i, lp in top[:k]} for _, top in pos]}


class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if a.never_ready:
            return self.send(503, {"error": "loading model"})
        if self.path == "/v1/models":
            return self.send(200, {"object": "list", "data": [{"id": a.model, "owned_by": "fake"}]})
        if self.path == "/version":
            return self.send(200, {"version": "0.0.1-fake"})
        self.send(404, {"error": "no such path"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if a.requests:
            with open(a.requests, "a") as f:
                f.write(json.dumps(body) + "\n")
        time.sleep(a.slow)
        seed = body["seed"] if body.get("temperature") else 0
        pos = positions(body["prompt"], body["max_tokens"], seed)
        lp = (vllm if a.dialect == "vllm" else llama)(pos, body["logprobs"])
        choice = {"index": 0, "text": "x" * len(pos), "logprobs": lp, "finish_reason": "length"}
        choices = [choice, dict(choice, index=1)] if a.bad == "two-choices" else [choice]
        self.send(200, {"id": "c", "object": "text_completion", "model": a.model, "choices": choices,
                        "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(pos)}})


HTTPServer((a.host, a.port), H).serve_forever()
'''

PROMPTS = [{"id": "p0", "ids": [5, 11, 2]}, {"id": "p1", "ids": [40, 7]}]


def expected(prompt: list[int], n: int, seed: int = 0) -> list[int]:
    out, last = [], prompt[-1] + seed
    for _ in range(n):
        last = (3 * last + 1) % VOCAB
        out.append(last)
    return out


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "fake_server.py"
    path.write_text(FAKE)
    return path


def server(fake: Path, pids: Path, *flags: str) -> dict:
    argv = ["{bin}/python", str(fake), "--host", "{host}", "--port", "{port}", "--model", "{model}"]
    return {"server": [*argv, "--pids", str(pids), *flags], "ready_timeout_s": 20, "stop_timeout_s": 3}


def openai_case(arms: dict, **over) -> Case:
    base = {"issue": "x/y#1", "what": "w", "engine": "openai_server", "package": "vllm",
            "affected": {"version": "1"}, "fixed": {"version": "2"}, "subject": "qwen3", "arms": arms,
            "timeout_s": 60}  # fmt: skip
    return Case.model_validate(base | over)


def job(c: Case, **over) -> dict:
    base = {"model": "tiny-model", "draft": None, "prompts": PROMPTS, "arms": c.arms, "max_new_tokens": 6,
            "sampling": None, "samples": 1, "seed": 0, "threads": 1, "logits": True}  # fmt: skip
    return base | over


def pids_of(path: Path) -> list[int]:
    return [int(p) for line in path.read_text().splitlines() for p in line.split()]


def alive(pid: int) -> bool:
    """A process that still runs (a zombie awaiting its reaper counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def gone(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def test_the_engine_has_its_driver():
    assert ENGINES["openai_server"] == "openai_server.py" and (DRIVERS / "openai_server.py").exists()
    text = (DRIVERS / "openai_server.py").read_text()
    assert "orthrus" not in {
        ln.split()[1].split(".")[0] for ln in text.splitlines() if ln.startswith(("import ", "from "))
    }


def test_both_arms_recorded_and_judged_equal_in_both_dialects_and_the_servers_are_gone(fake, tmp_path):
    """The reference's server answers as llama.cpp's, the speculative's as vLLM's: the same ids read
    from both, the reference's top-2 beside each token, no divergence; no server process left."""
    pids, requests = tmp_path / "pids", tmp_path / "requests.jsonl"
    c = openai_case(
        {
            "reference": server(fake, pids, "--requests", str(requests)),
            "speculative": server(fake, pids, "--dialect", "vllm") | {"request": {"ignore_eos": True}},
        }
    )
    out = tmp_path / "out.jsonl"
    assert drive(c, sys.executable, job(c), out, tmp_path / "log") is None
    env, records = judge.read(out)
    assert env["engine"] == "fake" and env["version"] == "0.0.1-fake" and env["top2"] == "log-probabilities"
    assert "{port}" in env["commands"]["reference"] and env["requests"]["speculative"] == {"ignore_eos": True}
    assert len(records) == 4 and {r["arm"] for r in records} == {"reference", "speculative"}
    for r in records:
        assert r["tokens"] == expected(next(p["ids"] for p in PROMPTS if p["id"] == r["prompt_id"]), 6)
    ref = [r for r in records if r["arm"] == "reference"]
    assert all(r["top2"] == [[[t, -0.1], [(t + 1) % VOCAB, -2.5]] for t in r["tokens"]] for r in ref)
    assert not any("top2" in r for r in records if r["arm"] == "speculative")
    verdict = judge.greedy(records, env)
    assert verdict["divergent"] == 0 and not verdict["caught"]
    sent = [json.loads(x) for x in requests.read_text().splitlines()]
    assert [b["prompt"] for b in sent] == [p["ids"] for p in PROMPTS]
    assert all(b["temperature"] == 0 and b["logprobs"] == 2 and b["max_tokens"] == 6 for b in sent)
    assert all(b["model"] == "tiny-model" for b in sent)  # the first model /v1/models lists
    assert len(pids_of(pids)) == 4 and gone(pids_of(pids))
    assert not list(tmp_path.glob("*.tmp"))


def test_a_speculative_arm_that_emits_its_runner_up_is_judged_structural(fake, tmp_path):
    pids = tmp_path / "pids"
    c = openai_case({"reference": server(fake, pids), "speculative": server(fake, pids, "--bug", "2")})
    out = tmp_path / "out.jsonl"
    assert drive(c, sys.executable, job(c), out, tmp_path / "log") is None
    env, records = judge.read(out)
    verdict = judge.greedy(records, env)
    assert verdict["caught"] and verdict["structural"] == 2 and verdict["divergent"] == 2


def test_a_sampled_case_sends_its_settings_and_a_seed_per_sample(fake, tmp_path):
    pids, requests = tmp_path / "pids", tmp_path / "requests.jsonl"
    arm = server(fake, pids, "--requests", str(requests))
    c = openai_case({"reference": arm, "speculative": arm}, sampling={"temperature": 0.7, "top_k": 5})
    spec = job(c, sampling=c.sampling.model_dump(), samples=3, seed=10, prompts=PROMPTS[:1])
    out = tmp_path / "out.jsonl"
    assert drive(c, sys.executable, spec, out, tmp_path / "log") is None
    _, records = judge.read(out)
    assert [r["tokens"] for r in records if r["arm"] == "speculative"] == [
        expected([5, 11, 2], 6, 10 + s) for s in range(3)
    ]
    assert not any("top2" in r for r in records)  # sampled: no logits read
    sent = [json.loads(x) for x in requests.read_text().splitlines()]
    assert [b["seed"] for b in sent] == [10, 11, 12] * 2
    assert all(
        (b["temperature"], b["top_k"], b["top_p"], b["min_p"], b["logprobs"]) == (0.7, 5, 1.0, 0.0, 1) for b in sent
    )


@pytest.mark.parametrize(
    "bad, field",
    [
        ("two-choices", "field choices: 2 choices"),
        ("float-id", "field choices[0].logprobs.content[0].id (position 0): 7.0 is not an integer token id"),
    ],
)
def test_a_malformed_answer_fails_in_one_line_and_writes_nothing(fake, tmp_path, bad, field):
    pids = tmp_path / "pids"
    c = openai_case({"reference": server(fake, pids, "--bad", bad), "speculative": server(fake, pids)})
    out = tmp_path / "out.jsonl"
    why = drive(c, sys.executable, job(c), out, tmp_path / "log")
    assert (
        why
        and why.startswith("zoo driver (openai_server): DriverError: the reference arm's server")
        and "\n" not in why
    )
    assert "prompt p0 sample 0" in why and field in why
    assert not out.exists() and not (tmp_path / "out.jsonl.tmp").exists()
    assert gone(pids_of(pids))


def test_a_server_that_never_becomes_ready_ends_within_its_timeout_and_leaves_no_process(fake, tmp_path):
    pids = tmp_path / "pids"
    arm = server(fake, pids, "--never-ready", "--ignore-term") | {"ready_timeout_s": 3}
    c = openai_case({"reference": arm, "speculative": arm})
    start = time.monotonic()
    why = drive(c, sys.executable, job(c), tmp_path / "out.jsonl", tmp_path / "log")
    took = time.monotonic() - start
    assert why and "did not answer GET /v1/models within ready_timeout_s (3 s)" in why and "503" in why
    assert took < 3 + 3 + 5, took  # the timeout, the stop's grace, the starts
    assert len(pids_of(pids)) == 2 and gone(pids_of(pids))
    assert not (tmp_path / "out.jsonl").exists()


def test_a_server_that_exits_at_once_fails_without_waiting_for_its_timeout(tmp_path):
    arm = {"server": ["{bin}/python", "-c", "raise SystemExit(3)", "{host}", "{port}"], "ready_timeout_s": 60}
    c = openai_case({"reference": arm, "speculative": arm})
    start = time.monotonic()
    why = drive(c, sys.executable, job(c), tmp_path / "out.jsonl", tmp_path / "log")
    assert why and "the reference arm's server (python at 127.0.0.1:" in why and "exited before it answered" in why
    assert time.monotonic() - start < 15
    assert "the server exited with code 3" in (tmp_path / "log").read_text()


@pytest.mark.parametrize(
    "arms, message",
    [
        ({"server": ["x", "--host", "{host}"]}, "arms.reference.server: no {port}"),
        ({"server": ["x", "--port", "{port}"]}, "arms.reference.server: no {host}"),
        ({"server": ["x", "{host}", "{port}", "{draft}"]}, "arms.reference.server: names {draft}"),
        (
            {"server": ["x", "{host}", "{port}"], "request": {"seed": 1}},
            "arms.reference.request.seed: set by the driver",
        ),
        ({"server": ["x", "{host}", "{port}"], "serve": 1}, "arms.reference.serve: not an arm key"),
    ],
)
def test_a_wrong_arm_is_refused_before_any_server_starts(tmp_path, arms, message):
    ok = {"server": ["x", "{host}", "{port}"]}
    c = openai_case({"reference": arms, "speculative": ok})
    why = drive(c, sys.executable, job(c), tmp_path / "out.jsonl", tmp_path / "log")
    assert why and message in why


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_driver_takes_its_server_down(fake, tmp_path, sig):
    """SIGTERM: the driver stops its server and fails in one line; SIGKILL (orthrus.zoo.run's kill of a
    driver past its time): the keeper sees the pipe close and takes the server's group down."""
    pids = tmp_path / "pids"
    arm = server(fake, pids, "--slow", "60")
    c = openai_case({"reference": arm, "speculative": arm})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(job(c)))
    out = tmp_path / "out.jsonl"
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(DRIVERS / "openai_server.py"), str(spec), str(out)],
            stdout=log,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the server up and a request in flight
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    if sig == signal.SIGTERM:
        assert err.strip().splitlines()[-1] == "zoo driver (openai_server): Stopped: stopped by SIGTERM"
    assert len(pids_of(pids)) == 2 and gone(pids_of(pids), within=10)
    assert not out.exists() and not (tmp_path / "out.jsonl.tmp").exists()
