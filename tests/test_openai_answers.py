"""A server's answers as untrusted input (issue 62): every time bound binds, every answer is checked
before anything is written, a transient failure is retried a bounded number of times, and llama.cpp's
own /completion dialect returns every id. Each case is a fake server on the loopback (a few lines of
http.server) that answers wrongly in one way, run through the engine's command line as the workflow
runs it: it must end within its bound in one line naming the server, the request and the field (no
traceback, exit 2) and write nothing, or write an honest record."""

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from orthrus.engines import openai_http

BAD = textwrap.dedent(
    """
    import json, sys, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    mode = args[args.index("--mode") + 1]
    dialect = args[args.index("--dialect") + 1] if "--dialect" in args else "llama"
    lock, seen = threading.Lock(), {"post": 0, "get": 0}
    if "--note" in args:  # where the test finds the port the job chose
        open(args[args.index("--note") + 1], "w").write(str(port))

    def honest(body):
        n, last = body["max_tokens"], body["prompt"][-1]
        toks = [(last + i) % 50 for i in range(1, n + 1)]
        if dialect == "vllm":
            lp = {"tokens": [f"token_id:{t}" for t in toks], "token_logprobs": [-0.1] * n,
                  "top_logprobs": [{f"token_id:{t}": -0.1, f"token_id:{t + 1}": -2.5} for t in toks]}
        else:
            lp = {"content": [{"id": t, "logprob": -0.1, "top_logprobs": [{"id": t, "logprob": -0.1},
                  {"id": t + 1, "logprob": -2.5}]} for t in toks]}
        return {"choices": [{"index": 0, "text": "x", "logprobs": lp, "finish_reason": "length"}],
                "usage": {"completion_tokens": n}}

    def spoil(a):  # the answer to a prompt's request (the check request before it is honest)
        c, lp = a["choices"][0], a["choices"][0]["logprobs"]
        if mode == "two-choices": a["choices"].append(dict(c, index=1))
        elif mode == "wrong-index": c["index"] = 3
        elif mode == "no-choices": a["choices"] = []
        elif mode == "error-200": return {"error": {"message": "model overloaded", "type": "server_error"}}
        elif mode == "fractional-id": lp["content"][1]["id"] = 12.5
        elif mode == "outside-vocab": lp["content"][1]["id"] = 999
        elif mode == "null-logprob": lp["content"][1]["logprob"] = None
        elif mode == "nan-logprob": lp["content"][1]["top_logprobs"][1]["logprob"] = float("nan")
        elif mode == "positive-logprob":
            lp["content"][1]["logprob"] = lp["content"][1]["top_logprobs"][0]["logprob"] = 0.5
        elif mode == "inconsistent": lp["content"][1]["logprob"] = -1.5
        elif mode == "vllm-abc": lp["tokens"][1] = "token_id:abc"
        elif mode == "vllm-short-tops": lp["top_logprobs"] = lp["top_logprobs"][:-1]
        elif mode == "one-top": lp["content"][1]["top_logprobs"] = lp["content"][1]["top_logprobs"][:1]
        elif mode == "too-many-tokens": lp["content"] += lp["content"][:3]
        elif mode == "tiny-positive":  # a rounding of log 1, inside the tolerance: accepted
            lp["content"][1]["logprob"] = lp["content"][1]["top_logprobs"][0]["logprob"] = 1e-6
        return a

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, data, kind="application/json", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", kind); self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers(); self.wfile.write(data)

        def do_GET(self):
            with lock:
                seen["get"] += 1
            if mode == "stall-models" and seen["get"] > 1:  # healthy at the start, then stalls
                time.sleep(600)
            self.reply(200, json.dumps({"data": [{"id": "fake-model"}]}).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                seen["post"] += 1; n = seen["post"]
            later = n >= 2  # the check request is the first
            if mode == "stall-check" or (mode == "stall-later" and later):
                time.sleep(600)
            if mode == "trickle" and later:
                self.send_response(200); self.send_header("Content-Length", "100000"); self.end_headers()
                for _ in range(100000):
                    self.wfile.write(b" "); self.wfile.flush(); time.sleep(0.05)
            if mode == "huge" and later:
                self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
                self.close_connection = True
                self.wfile.write(b'{"pad": "' + b"x" * (17 * 2**20) + b'"}')
                return
            if mode == "not-json" and later:
                return self.reply(200, b"<html>busy</html>")
            if mode == "redirect" and later:
                return self.reply(302, b"", headers=[("Location", "http://127.0.0.1:1/v1/completions")])
            if mode.startswith(("flaky-", "drop-", "always-")) and later:
                kind, code = mode.split("-")
                if kind == "always" or n - 1 <= 2:  # the first two prompt requests fail, or every one
                    if kind == "drop":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    return self.reply(int(code), b'{"error": "boom ' + str(n).encode() + b'"}')
            answer = honest(body)
            out = spoil(answer) if later else answer
            self.reply(200, json.dumps(out).encode())

    class S(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # the job cut the connection: what this fake is for

    S(("127.0.0.1", port), H).serve_forever()
    """
)

PROMPTS = [
    {
        "prompt_id": f"p{i}",
        "prompt_token_ids": [1, 2, 10 + i],
        "max_new_tokens": 5,
        "stop_token_ids": [49],
        "message": "empty",
        "temperature": 0.0,
    }
    for i in range(4)
]


def _run(tmp_path, command, name="x", **over) -> dict:
    return {
        "name": name,
        "out": str(tmp_path / f"{name}.jsonl"),
        "dtype": "fp32",
        "speculative": "none",
        "k": 4,
        "seed": 0,
        "concurrency": 1,
        "repeats": 1,
        "slots": 1,
        "planted": False,
        "model": "",
        "extra_body": {},
        "server_args": [],
        "timeout_s": 20,
        "vocab": 60,
        "server": {"kind": "command", "command": command, "model_dir": str(tmp_path)},
    } | over


def _job(tmp_path, mode, limit=30, dialect="llama", note=None, **over):
    """The engine job (`orthrus engine-run --engine openai`) against a fake server started from its
    command with `mode`: (exit code, stderr's last line, seconds, the run)."""
    script = tmp_path / "bad_server.py"
    script.write_text(BAD)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    command = [sys.executable, str(script), "--port", "{port}", "--mode", mode, "--dialect", dialect]
    command += ["--note", note] if note else []
    run = _run(tmp_path, command, **over)
    t0 = time.monotonic()
    try:
        res = subprocess.run(
            [sys.executable, "-m", "orthrus", "engine-run", "--engine", "openai"]
            + ["--prompts", str(prompts), "--runs", json.dumps([run])],
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not stop within {limit} s", pytrace=False)
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""
    return res.returncode, last, time.monotonic() - t0, run


def _refused(tmp_path, mode, *patterns, **kw) -> str:
    rc, line, _, run = _job(tmp_path, mode, **kw)
    assert rc == 2 and line.startswith("orthrus engine-run: openai engine: the server at http://127.0.0.1:"), line
    for p in patterns:
        assert p in line, (p, line)
    assert not (tmp_path / "x.jsonl").exists()  # nothing written
    assert not list(tmp_path.glob("*.jsonl.*")), list(tmp_path.iterdir())  # nor a half-written file
    assert not _fakes(str(tmp_path / "bad_server.py"))  # nor a server left running
    return line


# -- 1. every bound binds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, waiting_for",
    [
        ("stall-check", "the answer to the check request (prompt p0, 4 tokens)"),
        ("stall-models", "the answer to the model list (GET /v1/models)"),
        ("trickle", "the body of the answer to prompt p"),
        ("stall-later", "the answer to prompt p"),
    ],
)
def test_a_server_that_stalls_or_trickles_is_cut_off_at_the_runs_bound(tmp_path, mode, waiting_for):
    """timeout_s: 2 binds the check request, /v1/models, each body (a trickling one too) and the wait
    for the requests in flight (4 at once): the job stops within a few seconds of it, names the server
    and what it waited for, and leaves no file, no server process and no port."""
    t0 = time.monotonic()
    line = _refused(tmp_path, mode, "timeout_s = 2 s", waiting_for, timeout_s=2, concurrency=4)
    assert time.monotonic() - t0 < 2 + 8, line  # the bound, the job's start and the server's stop


def test_a_stopped_run_leaves_no_port_listening(tmp_path):
    note = tmp_path / "port.txt"
    rc, line, _, _ = _job(tmp_path, "stall-later", timeout_s=2, note=str(note))
    assert rc == 2 and "timeout_s = 2 s" in line
    with socket.socket() as s:  # the server's port is closed
        assert s.connect_ex(("127.0.0.1", int(note.read_text()))) != 0


# -- 2. an answer is checked before anything is written -------------------------------------------


@pytest.mark.parametrize(
    "mode, dialect, patterns",
    [
        ("two-choices", "llama", ["prompt p0", "field choices: 2 choices, not exactly one"]),
        ("wrong-index", "llama", ["prompt p0", "field choices[0].index: 3, not 0"]),
        ("no-choices", "llama", ["prompt p0", "field choices: 0 choices"]),
        ("error-200", "llama", ["prompt p0", "answered 200 with an error object", "model overloaded"]),
        ("not-json", "llama", ["prompt p0", "not JSON", "<html>busy</html>"]),
        ("redirect", "llama", ["prompt p0", "answered 302", "127.0.0.1:1", "not followed"]),
        ("huge", "llama", ["prompt p0", f"over {openai_http.MAX_BODY_BYTES} bytes"]),
        ("fractional-id", "llama", ["prompt p0", "position 1", "content[1].id: 12.5 is not an integer token id"]),
        ("outside-vocab", "llama", ["prompt p0", "position 1", "content[1].id: 999 is outside the vocabulary (0..59)"]),
        ("null-logprob", "llama", ["prompt p0", "position 1", "content[1].logprob: null is not a finite"]),
        ("nan-logprob", "llama", ["prompt p0", "position 1", "top_logprobs[1].logprob: NaN is not a finite"]),
        ("positive-logprob", "llama", ["prompt p0", "position 1", "0.5 is above 0 (a probability over 1"]),
        ("inconsistent", "llama", ["prompt p0", "position 1", "log-probability is -1.5, its entry here -0.1"]),
        ("one-top", "llama", ["prompt p0", "position 1", "field top log-probabilities: 1 listed, not the 2"]),
        ("too-many-tokens", "llama", ["prompt p0", "8 tokens, over the request's budget of 5"]),
        ("vllm-abc", "vllm", ["prompt p0", "position 1", "tokens[1]: 'token_id:abc' is not token_id:N"]),
        ("vllm-short-tops", "vllm", ["prompt p0", "logprobs.top_logprobs: 4 entries for 5 tokens"]),
    ],
)
def test_a_wrong_answer_ends_the_run_in_one_line_naming_server_request_and_field(tmp_path, mode, dialect, patterns):
    _refused(tmp_path, mode, *patterns, dialect=dialect)


@pytest.mark.parametrize("mode", ["fractional-id", "redirect"])
def test_a_planted_runs_error_names_the_server_behind_the_proxy(tmp_path, mode):
    _refused(tmp_path, mode, "prompt p0", "(through the planted proxy at http://127.0.0.1:", planted=True)


def test_a_log_probability_above_zero_by_a_rounding_is_accepted(tmp_path):
    rc, line, _, run = _job(tmp_path, "tiny-positive")
    assert rc == 0, line
    rec = json.loads((tmp_path / "x.jsonl").read_text().splitlines()[0])
    assert rec["logprobs"][1][0] == [12, 1e-6] and rec["extra"]["retries"] == 0


# -- 3. transient failures are retried, a bounded number of times ----------------------------------


@pytest.mark.parametrize("mode", ["flaky-503", "flaky-429", "flaky-500", "flaky-502", "drop-0"])
def test_a_transient_failure_is_retried_and_counted(tmp_path, mode):
    """The first two prompt requests fail (a busy answer or a dropped connection): each is retried,
    the run is whole, and its record counts the retries."""
    rc, line, _, _ = _job(tmp_path, mode)
    assert rc == 0, line
    recs = [json.loads(x) for x in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in recs] == ["p0", "p1", "p2", "p3"]
    assert all(r["extra"]["retries"] == 2 for r in recs)
    assert recs[0]["token_ids"] == [11, 12, 13, 14, 15]


def test_a_request_that_keeps_failing_stops_the_run_quoting_the_last_answer(tmp_path):
    t0 = time.monotonic()
    _refused(tmp_path, "always-500", "prompt p0", "answered 500", "boom", f"after {openai_http.RETRIES} retries")
    # 4 tries, waiting 0.5 + 1 + 2 s between them
    assert time.monotonic() - t0 < sum(openai_http.BACKOFF_S * 2**k for k in range(openai_http.RETRIES)) + 8


def _fakes(script: str) -> list[str]:
    import os

    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if script.encode() in f.read():
                        found.append(p)
            except OSError:
                pass
    return found


def test_a_retry_past_the_bound_is_not_waited_for(tmp_path):
    t0 = time.monotonic()
    _refused(
        tmp_path, "always-500", "timeout_s = 2 s", "leaves no time to retry prompt p0", "answered 500", timeout_s=2
    )
    assert time.monotonic() - t0 < 2 + 8
