"""The OpenAI engine (orthrus/engines/openai_*.py, issue 54): the API's dialects, the capability probe, the
load it puts on a server, the planted proxy, a server started from a command or reached by its URL, and
the config's expansion into one run per concurrency. Against a fake server (a few lines of http.server
answering as llama.cpp's or vLLM's OpenAI endpoint does), so these run without either binary; the real
servers run in tests/test_llamacpp.py's workflow arm."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import study

from orthrus.engines import openai_answers as answers
from orthrus.engines import openai_api as api
from orthrus.engines import openai_run
from orthrus.engines.openai_engine import OpenAI, expand
from orthrus.engines.openai_http import Session
from orthrus.engines.openai_planted import PlantedProxy, perturbed
from orthrus.engines.server import ServerError

FAKE = textwrap.dedent(
    """
    import json, random, sys, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    dialect = args[args.index("--dialect") + 1] if "--dialect" in args else "llama"
    delay = float(args[args.index("--delay") + 1]) if "--delay" in args else 0.05
    log = args[args.index("--log") + 1] if "--log" in args else None
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, out):
            data = json.dumps(out).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # --owned-by llamacpp: llama-server's /v1/models says whose it is; --build B: its /props
            if self.path == "/props" and "--build" in args:
                return self.reply({"build_info": args[args.index("--build") + 1]})
            if self.path != "/v1/models":
                self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
            owner = args[args.index("--owned-by") + 1] if "--owned-by" in args else "fake"
            self.reply({"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": owner}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state["now"] += 1; state["max"] = max(state["max"], state["now"]); busy = state["now"]
            time.sleep(delay)
            n, last = body.get("max_tokens", body.get("n_predict")), body["prompt"][-1]
            if body.get("temperature", 0) > 0:
                rng = random.Random(body.get("seed") if "--ignore-seed" not in args else None)
                toks = [rng.randrange(50) for _ in range(n)]
            else:  # greedy; with --batch-variant, a request that shares the server changes its third token
                toks = [(last + i) % 50 for i in range(1, n + 1)]
                if "--batch-variant" in args and busy > 1 and n > 2:
                    toks[2] = (toks[2] + 1) % 50
            # --drop-utf8: llama-server leaves out the entry (id included) of a token that ends inside a
            # UTF-8 character, here the first (as SmolLM2's first token of a Russian answer), in both its
            # endpoints' log-probabilities
            keep = [i for i in range(len(toks)) if not ("--drop-utf8" in args and i == 0)]
            if self.path == "/completion":  # llama-server's own endpoint: every id in `tokens`
                probs = [{"id": toks[i], "token": "x", "logprob": -0.1, "top_logprobs": [
                    {"id": toks[i], "logprob": -0.1}, {"id": toks[i] + 1, "logprob": -2.5}]} for i in keep]
                out = {"index": 0, "content": "x", "tokens": toks, "completion_probabilities": probs,
                       "stop": True, "timings": {"predicted_n": n}}
                with lock:
                    state["now"] -= 1
                    if log:
                        open(log, "w").write(json.dumps({"max": state["max"], "last": body, "path": self.path}))
                return self.reply(out)
            if dialect == "llama":
                content = [{"id": t, "logprob": -0.1, "top_logprobs": [{"id": t, "logprob": -0.1},
                           {"id": t + 1, "logprob": -2.5}]} for i, t in enumerate(toks) if i in keep]
                if "--no-top" in args:  # llama-server speculating: ids, no probabilities
                    content = [{"id": c["id"], "logprob": -0.1, "top_logprobs": []} for c in content]
                logprobs = {"content": content}
            elif dialect == "vllm":
                logprobs = {"tokens": [f"token_id:{t}" for t in toks],
                            "top_logprobs": [{f"token_id:{t}": -0.1, f"token_id:{t + 1}": -2.5} for t in toks]}
            else:  # text only
                logprobs = None
            out = {"choices": [{"index": 0, "text": "x", "logprobs": logprobs, "finish_reason": "length"}],
                   "usage": {"completion_tokens": n}, "system_fingerprint": "fake-1"}
            with lock:
                state["now"] -= 1
                if log:
                    open(log, "w").write(json.dumps({"max": state["max"], "last": body}))
            self.reply(out)

    s = ThreadingHTTPServer(("127.0.0.1", port), H); s.daemon_threads = True; s.serve_forever()
    """
)


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_openai.py"
    script.write_text(FAKE)
    return str(script)


@pytest.fixture
def served(fake, tmp_path):
    """A started fake server: (url, log file); its extra arguments by indirect use of `start`."""
    procs = []

    def start(*extra):
        from orthrus.engines.server import free_port

        port, log = free_port(), tmp_path / f"log-{len(procs)}.json"
        procs.append(subprocess.Popen([sys.executable, fake, "--port", str(port), "--log", str(log), *extra]))
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                with Session(url, 1) as s:
                    s.call("GET", "/v1/models", None, "the model list")
                return url, log
            except ServerError:
                time.sleep(0.05)
        raise AssertionError("the fake server did not start")

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _ask(url, body, vocab=60):
    asked = answers.Asked(url, "prompt p0", vocab, body["max_tokens"])
    with Session(url, 30) as s:
        choice = answers.read_openai(s.call("POST", "/v1/completions", body, asked.label), asked)
    return choice.ids, choice.tops


def _probe(url, *args, **kw):
    with Session(url, 30) as s:
        api.probe(s, api.OPENAI, *args, **kw)


def _prompts(n=6, sampled=False):
    common = {"max_new_tokens": 5, "stop_token_ids": [49], "message": "empty", "temperature": 0.0}
    if sampled:
        common |= {"temperature": 0.7, "top_p": 0.9, "top_k": None, "n_samples": 4}
    return [{"prompt_id": f"p{i}", "prompt_token_ids": [1, 2, 10 + i]} | common for i in range(n)]


def _run(tmp_path, name="x", **over):
    return {
        "name": name,
        "out": str(tmp_path / f"{name}.jsonl"),
        "dtype": "fp32",
        "speculative": "none",
        "k": 4,
        "seed": 0,
        "concurrency": 1,
        "repeats": 2,
        "slots": 1,
        "planted": False,
        "model": "",
        "extra_body": {},
        "server_args": [],
        "timeout_s": 60,
        "vocab": 60,
    } | over


@pytest.mark.parametrize("dialect", ["llama", "vllm"])
def test_both_dialects_give_the_ids_and_the_top_two(served, dialect):
    url, _ = served("--dialect", dialect)
    ids, tops = _ask(url, api.greedy_body(_prompts()[0], "fake-model"))
    assert ids == [11, 12, 13, 14, 15]
    assert tops[0] == [[11, -0.1], [12, -2.5]] and len(tops) == 5


def test_a_server_that_returns_text_alone_is_refused_naming_the_token_ids(served):
    url, _ = served("--dialect", "text")
    # the way out named where the server is llama.cpp's (its own endpoint returns every id)
    with pytest.raises(
        api.Missing, match=r"returns no token ids: .*/completion returns every id .*api: llamacpp-completion"
    ):
        _probe(url, "fake-model", _prompts()[0], sampled=False)


def test_a_plain_server_without_top_two_is_refused_a_speculative_one_is_not(served):
    """llama-server reports no probabilities for the tokens its speculation emits (for some prompts none
    at all): a speculative run goes on, its divergences judged by the reference's numbers alone."""
    url, _ = served("--no-top")
    with pytest.raises(api.Missing, match="returns no top-2 log-probabilities"):
        _probe(url, "fake-model", _prompts()[0], sampled=False)
    _probe(url, "fake-model", _prompts()[0], sampled=False, need_top=False)


def test_a_server_that_ignores_seeds_is_refused_for_sampling(served):
    url, _ = served("--ignore-seed")
    _probe(url, "fake-model", _prompts()[0], sampled=False)  # greedy needs no seed
    with pytest.raises(api.Missing, match="does not honour a request's `seed`"):
        _probe(url, "fake-model", _prompts()[0], sampled=True)


def test_a_greedy_run_puts_its_load_on_the_server_and_counts_every_repeat(served, tmp_path):
    url, log = served("--delay", "0.2")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(8)))
    runs = [
        _run(tmp_path, "c1", server={"kind": "url", "url": url}),
        _run(tmp_path, "c4", concurrency=4, server={"kind": "url", "url": url}),
    ]
    openai_run.run_all(str(prompts), runs[:1], 1)
    assert json.loads(log.read_text())["max"] == 1  # one at a time
    openai_run.run_all(str(prompts), runs[1:], 1)
    assert json.loads(log.read_text())["max"] == 4  # four in flight, never more
    recs = [json.loads(line) for line in (tmp_path / "c4.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in recs] == [f"p{i}" for i in range(8)]
    assert all(len(r["extra"]["completions"]) == 2 and r["extra"]["completions"][0] == r["token_ids"] for r in recs)
    assert max(n for r in recs for n in r["extra"]["in_flight"]) == 4
    env = recs[0]["env"]
    assert env["concurrency"] == 4 and env["repeats"] == 2 and env["api"] == "openai-completions"
    assert env["server"] == "url" and env["url"] == url and env["model"] == "fake-model" and env["planted"] is False
    assert recs[0]["logprobs"][0] == [[11, -0.1], [12, -2.5]] and recs[0]["forwards"] == 5


def test_a_batch_variant_server_changes_only_under_load(served, tmp_path):
    """The fake's --batch-variant changes a token when it has company: the runs at 1 and 4 differ there."""
    url, _ = served("--batch-variant", "--delay", "0.2")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(8)))
    runs = [
        _run(tmp_path, "c1", server={"kind": "url", "url": url}),
        _run(tmp_path, "c4", concurrency=4, server={"kind": "url", "url": url}),
    ]
    openai_run.run_all(str(prompts), runs, 1)
    one, four = (
        [json.loads(x)["token_ids"] for x in (tmp_path / f"{n}.jsonl").read_text().splitlines()] for n in ("c1", "c4")
    )
    assert all(a == [(10 + i + j) % 50 for j in range(1, 6)] for i, a in enumerate(one))
    assert sum(a != b for a, b in zip(one, four)) >= 4


def test_a_sampled_run_seeds_every_request(served, tmp_path):
    url, _ = served()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(2, sampled=True)))
    for name in ("a", "b"):
        openai_run.run_all(
            str(prompts), [_run(tmp_path, name, concurrency=3, seed=7, server={"kind": "url", "url": url})], 1
        )
    a, b = ([json.loads(x) for x in (tmp_path / f"{n}.jsonl").read_text().splitlines()] for n in ("a", "b"))
    assert a == b or [r["samples"] for r in a] == [r["samples"] for r in b]  # the same seeds at any load
    assert len(a[0]["samples"]) == 4 and len({tuple(s) for s in a[0]["samples"]}) > 1
    assert a[0]["env"]["seed"] == 7 and a[1]["env"]["seed"] == 8 and a[0]["env"]["concurrency"] == 3


def test_the_planted_proxy_changes_a_request_only_while_another_is_in_flight(served, tmp_path):
    assert perturbed({"temperature": 0.0}, 1) == {"temperature": 0.0}
    assert perturbed({"temperature": 0.0}, 2)["temperature"] == 1.0
    assert perturbed({"temperature": 0.7, "seed": 3}, 5) == {"temperature": 0.7, "seed": 3}  # sampled: left alone
    url, _ = served("--delay", "0.2")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(8)))
    planted = PlantedProxy(url)
    bodies = [api.greedy_body(p, "fake-model") for p in _prompts(8)]
    with planted as proxy, Session(proxy, 60) as s:
        labels, read = [f"prompt {i}" for i in range(8)], lambda i, answer: answer
        api.send_all(s, "/v1/completions", bodies, labels, 1, read)
        assert planted.perturbed == 0  # alone: passed through
        api.send_all(s, "/v1/completions", bodies, labels, 4, read)
        assert planted.perturbed > 0
    runs = [
        _run(tmp_path, "p1", planted=True, server={"kind": "url", "url": url}),
        _run(tmp_path, "p4", planted=True, concurrency=4, server={"kind": "url", "url": url}),
    ]
    openai_run.run_all(str(prompts), runs, 1)
    p1, p4 = ([json.loads(x) for x in (tmp_path / f"{n}.jsonl").read_text().splitlines()] for n in ("p1", "p4"))
    assert p1[0]["extra"]["perturbed_requests"] == 0 and p4[0]["extra"]["perturbed_requests"] > 0
    assert p4[0]["env"]["planted"] is True
    assert sum(a["token_ids"] != b["token_ids"] for a, b in zip(p1, p4)) > 0


def test_a_run_past_its_time_bound_stops_naming_it(served, tmp_path):
    url, _ = served("--delay", "0.5")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(8)))
    with pytest.raises(ServerError, match="timeout_s"):
        openai_run.run_all(str(prompts), [_run(tmp_path, timeout_s=1, server={"kind": "url", "url": url})], 1)
    assert not (tmp_path / "x.jsonl").exists()  # nothing half-written


def test_a_command_server_is_started_on_the_loopback_and_stopped(fake, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(3)))
    command = [sys.executable, fake, "--host", "{host}", "--port", "{port}", "--dialect", "vllm"]
    run = _run(tmp_path, server={"kind": "command", "command": command, "model_dir": str(tmp_path)})
    openai_run.run_all(str(prompts), [run], 1)
    rec = json.loads((tmp_path / "x.jsonl").read_text().splitlines()[0])
    assert rec["env"]["server"] == "command" and rec["token_ids"] == [11, 12, 13, 14, 15]
    assert not _fakes(fake)


def _is_fake(pid: str, fake: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return fake.encode() in f.read()
    except OSError:
        return False


def test_an_entry_becomes_one_run_per_concurrency_each_compared_with_its_run_at_one():
    found = expand(
        {
            "plain": {"engine": "openai", "launch": "llamacpp", "precision": "fp32", "concurrency": [1, 4, 16]},
            "spec": {
                "engine": "openai",
                "launch": "vllm",
                "precision": "fp32",
                "speculative": "ngram",
                "concurrency": [1, 4],
                "reference": "plain",
            },
            "other": {"engine": "llamacpp", "precision": "fp32"},
        }
    )
    assert sorted(found) == ["other", "plain-c1", "plain-c16", "plain-c4", "spec-c1", "spec-c4"]
    assert "reference" not in found["plain-c1"] and found["plain-c4"]["reference"] == "plain-c1"
    assert found["spec-c1"]["reference"] == "plain-c1" and found["spec-c4"]["reference"] == "spec-c1"
    # llama.cpp's slots follow the load (a start per concurrency), vLLM's are the largest (one start)
    assert [found[f"plain-c{c}"]["slots"] for c in (1, 4, 16)] == [1, 4, 16]
    assert found["spec-c1"]["slots"] == found["spec-c4"]["slots"] == 4
    # and so the runs of one vLLM entry share one server start, llama.cpp's do not
    cfg = study()
    where = {"results": "results", "teacher": "teacher"}
    runs = {n: OpenAI().run(n, found[n], f"{n}.jsonl", "fp32", 0, cfg, **where) for n in found if n != "other"}
    assert openai_run.server_key(runs["spec-c1"]) == openai_run.server_key(runs["spec-c4"])
    assert openai_run.server_key(runs["plain-c1"]) != openai_run.server_key(runs["plain-c4"])


@pytest.mark.parametrize(
    "entry, message",
    [
        ({}, "give exactly one of launch"),
        ({"url": "http://127.0.0.1:1", "launch": "vllm"}, "give exactly one of launch"),
        ({"url": "localhost:8000"}, "is not an http"),
        ({"url": "http://127.0.0.1:1", "concurrency": [4, 16]}, "lacks 1"),
        ({"url": "http://127.0.0.1:1", "kv_cache": "f32"}, "a setting of a launched server"),
        ({"launch": "vllm", "api": "llamacpp-completion"}, "launch: vllm does not serve"),
    ],
)
def test_an_entry_that_cannot_run_is_refused_naming_the_key(entry, message):
    problems = OpenAI().entry_problems("decode.engines.x", {"engine": "openai", "precision": "fp32"} | entry, study())
    assert any(message in p for p in problems), problems


def test_a_sampled_entry_takes_one_concurrency():
    e = {"engine": "openai", "url": "http://127.0.0.1:1", "concurrency": [1, 4]}
    assert any("one number" in p for p in OpenAI().entry_problems("sampling.engines.x", e, study()))
    assert not OpenAI().entry_problems("sampling.engines.x", e | {"concurrency": 4}, study())


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_job_leaves_no_server(fake, tmp_path, signal_name):
    """The job that started a server from its command is killed while its requests wait: the server
    goes too (SIGTERM: the `finally` stops it; SIGKILL: the kernel's parent-death signal)."""
    import signal

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(4)))
    command = [sys.executable, fake, "--host", "{host}", "--port", "{port}", "--delay", "600"]
    run = _run(tmp_path, server={"kind": "command", "command": command, "model_dir": str(tmp_path)})
    script = tmp_path / "job.py"
    script.write_text(
        "import json\nfrom orthrus.engines import openai_api, openai_run\n"
        "openai_api.probe = lambda *a, **k: None\n"  # straight to the requests, which hang
        f"openai_run.run_all({str(prompts)!r}, [json.loads({json.dumps(json.dumps(run))})], 1)\n"
    )
    job = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _fakes(fake) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _fakes(fake), "the fake server never started"
    time.sleep(1.5)  # healthy: the job now waits on its requests
    job.send_signal(getattr(signal, signal_name))
    job.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _fakes(fake) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _fakes(fake)


def _fakes(fake: str) -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit() and _is_fake(p, fake)]


def test_llamacpps_own_endpoint_returns_every_id_where_its_openai_one_drops_one(served, fake, tmp_path, monkeypatch):
    """llama-server's /v1/completions leaves out a token that ends inside a UTF-8 character (issue 62:
    15 of 36 SmolLM2 prompts lost); its /completion, which a `launch: llamacpp` entry reads, names every
    id in `tokens`: the record is whole, with no log-probabilities at that one position."""
    from orthrus.engines.openai_launch import Launch

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(4)))
    url, _ = served("--drop-utf8")
    openai_run.run_all(str(prompts), [_run(tmp_path, "v1", server={"kind": "url", "url": url})], 1)
    lost = [json.loads(x) for x in (tmp_path / "v1.jsonl").read_text().splitlines()]
    assert all(r["finish_reason"] == "token-ids-missing" and len(r["token_ids"]) == 4 for r in lost)

    log = tmp_path / "native.json"
    native = Launch(
        "fake llama-server",
        sys.executable,
        lambda port: [fake, "--port", str(port), "--log", str(log), "--drop-utf8", "--delay", "0.2"],
        body={"cache_prompt": False},
        dialect="llamacpp-completion",
    )
    monkeypatch.setattr(openai_run, "launch_for", lambda run, threads, prompts, launchers: native)
    runs = [
        _run(tmp_path, "n1", server={"kind": "command"}),
        _run(tmp_path, "n4", concurrency=4, planted=True, server={"kind": "command"}),
    ]
    openai_run.run_all(str(prompts), runs, 1)
    whole = [json.loads(x) for x in (tmp_path / "n1.jsonl").read_text().splitlines()]
    assert [r["token_ids"] for r in whole] == [[(10 + i + j) % 50 for j in range(1, 6)] for i in range(4)]
    assert all(r["finish_reason"] == "length" and r["env"]["api"] == "llamacpp-completion" for r in whole)
    # the check request's first position lists nothing either: the probe asks for the top two anywhere
    assert whole[0]["logprobs"][0] == [] and whole[0]["logprobs"][1] == [[12, -0.1], [13, -2.5]]
    sent = json.loads(log.read_text())
    assert sent["path"] == "/completion" and sent["last"]["n_probs"] == 2 and sent["last"]["return_tokens"]
    assert sent["last"]["cache_prompt"] is False
    planted = json.loads((tmp_path / "n4.jsonl").read_text().splitlines()[0])
    assert planted["extra"]["perturbed_requests"] > 0  # the planted proxy changes /completion requests too


@pytest.mark.parametrize("kind", ["url", "command"])
def test_a_llamacpp_server_the_audit_did_not_start_is_read_through_its_own_endpoint(
    served, fake, tmp_path, kind, capsys
):
    """A server given by `url` or `command` whose /v1/models says it is llama.cpp's (owned_by: llamacpp,
    as llama-server writes) is read through its /completion: where its /v1/completions drops the id of
    a token that ends inside a UTF-8 character (issue 62), every prompt is whole. The entry's `api:
    openai` reads the OpenAI endpoint: those prompts are error rows, said on stderr with the way out."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(4)))
    flags, log = ["--drop-utf8", "--owned-by", "llamacpp", "--build", "b9999-fake"], tmp_path / "sent.json"
    if kind == "url":
        url, log = served(*flags)
        server = {"kind": "url", "url": url}
    else:
        command = [sys.executable, fake, "--port", "{port}", "--log", str(log), *flags]
        server = {"kind": "command", "command": command, "model_dir": ""}
    openai_run.run_all(str(prompts), [_run(tmp_path, "native", server=server)], 1)
    whole = [json.loads(x) for x in (tmp_path / "native.jsonl").read_text().splitlines()]
    assert [r["token_ids"] for r in whole] == [[(10 + i + j) % 50 for j in range(1, 6)] for i in range(4)]
    assert all(r["finish_reason"] == "length" and r["env"]["api"] == "llamacpp-completion" for r in whole)
    assert whole[0]["env"]["server"] == kind and json.loads(log.read_text())["path"] == "/completion"
    # its record names what the server says it is: llama.cpp's (owned_by) for a url, the command's program
    # for a command, and the build its /props gives
    engine = "llamacpp" if kind == "url" else Path(sys.executable).name
    assert whole[0]["env"]["engine"] == engine and whole[0]["env"]["version"] == "b9999-fake", whole[0]["env"]
    assert "lack a token's id" not in capsys.readouterr().err

    openai_run.run_all(str(prompts), [_run(tmp_path, "v1", api="openai-completions", server=server)], 1)
    lost = [json.loads(x) for x in (tmp_path / "v1.jsonl").read_text().splitlines()]
    assert all(r["finish_reason"] == "token-ids-missing" and r["env"]["api"] == api.API for r in lost)
    assert "4 of 4 answers lack a token's id (/v1/completions)" in capsys.readouterr().err
    assert kind == "url" or not _fakes(fake)  # a command's server stopped (a url's is the fixture's)


@pytest.mark.slow
def test_a_real_llama_server_given_by_url_is_read_through_its_own_endpoint(tmp_path):
    """llama.cpp's own server on the shipped teacher (converted by its converter), started as a user
    would and given by `url`: its /v1/models says it is llama.cpp's, so the audit reads its /completion,
    every prompt whole; the same greedy ids its /v1/completions gives (`api: openai-completions`) where that gives
    them all."""
    from test_llamacpp import ROOT, llamacpp_server
    from transformers import AutoTokenizer

    from orthrus.engines import llamacpp
    from orthrus.engines.server import Server

    binary, teacher, gguf = llamacpp_server(), ROOT / "orthrus/world/subject/teacher", tmp_path / "t.gguf"
    convert = str(Path(binary).resolve().parent.parent / "convert")  # envs/build-llamacpp.sh's, beside it
    export = [sys.executable, "-m", "orthrus", "gguf-export", "--model-path", str(teacher), "--outtype", "f32"]
    subprocess.run([*export, "--converter", convert, "--out", str(gguf)], check=True, capture_output=True)
    tok = AutoTokenizer.from_pretrained(teacher)
    texts = ["Once upon a time", "Привет, как дела?", "The fox and the"]
    common = {"max_new_tokens": 16, "stop_token_ids": [tok.eos_token_id], "message": "", "temperature": 0.0}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt_id": f"p{i}", "prompt_token_ids": tok(t)["input_ids"]} | common) + "\n"
            for i, t in enumerate(texts)
        )
    )
    args = lambda port: llamacpp.server_args({}, str(gguf), port, 1, 256)  # noqa: E731
    with Server(binary, args, str(tmp_path / "server.log")) as url:
        for name, entry in (("native", {}), ("v1", {"api": "openai-completions"})):
            run = _run(tmp_path, name, repeats=1, vocab=len(tok), server={"kind": "url", "url": url})
            openai_run.run_all(str(prompts), [run | entry], 1)
    native, v1 = ([json.loads(x) for x in (tmp_path / f"{n}.jsonl").read_text().splitlines()] for n in ("native", "v1"))
    assert all(r["env"]["api"] == "llamacpp-completion" and r["finish_reason"] != "token-ids-missing" for r in native)
    assert all(r["env"]["api"] == api.API for r in v1)
    assert all(len(r["token_ids"]) > 0 and len(r["logprobs"]) == len(r["token_ids"]) for r in native)
    assert [a["token_ids"] for a, b in zip(native, v1) if b["finish_reason"] != "token-ids-missing"] == [
        b["token_ids"] for b in v1 if b["finish_reason"] != "token-ids-missing"
    ]


def test_the_ids_an_answer_may_hold_are_the_study_tokenizers(tmp_path):
    """What ingest checks a greedy file against (the tokenizer's length), and engine-samples a sampled
    one (the larger of it and the model's vocab_size): the engine refuses an id outside them first."""
    from pathlib import Path

    from transformers import AutoConfig, AutoTokenizer

    from orthrus.engines.openai_engine import vocabulary

    teacher = str(Path(__file__).resolve().parent.parent / "orthrus/world/subject/teacher")
    greedy, sampled = tmp_path / "g.jsonl", tmp_path / "s.jsonl"
    greedy.write_text(json.dumps(_prompts(1)[0]) + "\n")
    sampled.write_text(json.dumps(_prompts(1, sampled=True)[0]) + "\n")
    n = len(AutoTokenizer.from_pretrained(teacher))
    assert vocabulary(teacher, str(greedy)) == n
    assert vocabulary(teacher, str(sampled)) == max(n, AutoConfig.from_pretrained(teacher).vocab_size)
    assert vocabulary("", str(greedy)) is None


def test_a_launched_vllm_server_carries_the_entrys_patches_into_its_engine_core(monkeypatch):
    """vLLM samples in an engine core it spawns, which re-imports the parent's __main__ and nothing else
    of it: the server starts from vllm_serve.py, which applies ORTHRUS_VLLM_PATCHES as it is imported,
    with the entry's patches in that variable and in its records' env; an entry without patches runs
    none, whatever the job inherited (docs/findings/vllm-cpu-ngram-seed.md)."""
    import importlib

    from orthrus.engines import openai_launch, vllm_patches
    from orthrus.engines.launchers import LAUNCHERS

    monkeypatch.setattr(openai_launch, "vllm_version", lambda python, env: "0.32.0 2.13.0+cpu")
    monkeypatch.setenv(vllm_patches.ENV, "cpu-expand-float")  # inherited from the job's environment
    cfg = study({"engines": {"vllm_python": "/venv/bin/python"}})
    entry = {"engine": "openai", "launch": "vllm", "precision": "fp32", "speculative": "ngram", "concurrency": 4}
    for patches in ([], ["cpu-expand-float"]):
        run = OpenAI().run("x", entry | {"patches": patches}, "x.jsonl", "fp32", 0, cfg, results="r", teacher="t")
        run["server"]["model_dir"] = "/teacher"
        launch = openai_launch.launch_for(run, 1, _prompts(1), LAUNCHERS)
        assert launch.binary == "/venv/bin/python" and launch.args(8000)[0] == str(openai_launch.VLLM_SERVE)
        assert launch.env[vllm_patches.ENV] == ",".join(patches) and launch.known["patches"] == patches
    # the file applies what the variable names when it is imported (as the engine core imports it)
    applied = []
    monkeypatch.setattr(vllm_patches, "apply", applied.append)
    monkeypatch.delitem(sys.modules, "orthrus.engines.vllm_serve", raising=False)
    importlib.import_module("orthrus.engines.vllm_serve")
    assert applied == [["cpu-expand-float"]]
