"""llama.cpp's server as an engine (orthrus/engines/llamacpp.py, issue 45): the server's lifecycle
and records against a stand-in server (a few lines of http.server that answer as llama-server does),
so these run without the binary; the real server is tests/test_engines.py's slow arm."""

import json
import os
import sys
import textwrap

import pytest

from orthrus.engines import llamacpp

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]

FAKE = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    args = sys.argv[1:]
    if "--version" in args:
        print("version: 0 (fake)"); sys.exit(0)
    if "--die" in args:
        print("error: model file is not GGUF"); sys.exit(1)
    if "--taken" in args:
        print("couldn't bind HTTP server socket, hostname: 127.0.0.1"); sys.exit(1)
    port = int(args[args.index("--port") + 1])
    host = args[args.index("--host") + 1]

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = body["n_predict"]
            toks = [(body["prompt"][-1] + i) % 50 for i in range(1, n + 1)]
            probs = [{"id": t, "logprob": -0.1, "top_logprobs": [{"id": t, "logprob": -0.1},
                      {"id": t + 1, "logprob": -2.5}, {"id": t + 2, "logprob": -3.0}]} for t in toks]
            out = {"tokens": toks, "completion_probabilities": probs,
                   "timings": {"draft_n": 6, "draft_n_accepted": 4} if "--spec-type" in args else {}}
            data = json.dumps(out).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
            self.wfile.write(data)

    HTTPServer((host, port), H).serve_forever()
    """
)


@pytest.fixture
def fake_server(tmp_path):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE)
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def _prompts():
    common = {"max_new_tokens": 6, "stop_token_ids": [9], "message": "empty", "temperature": 0.0}
    return [
        {"prompt_id": "a", "prompt_token_ids": [1, 2, 3]} | common,  # 4, 5, ..., 9: cut at the stop id 9
        {"prompt_id": "b", "prompt_token_ids": [10, 20]} | common,  # 21 .. 26: no stop, length
    ]


def test_a_run_writes_records_and_leaves_no_server(fake_server, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    out = tmp_path / "plain.jsonl"
    log = str(tmp_path / "server.log")
    run = {"name": "plain", "out": str(out), "speculative": "none"}
    llamacpp.serve(fake_server, str(model), run, _prompts(), threads=1, log=log)
    a, b = (json.loads(line) for line in out.read_text().splitlines())
    assert a["token_ids"] == [4, 5, 6, 7, 8, 9] and a["finish_reason"] == "stop" and a["forwards"] == 6
    assert b["token_ids"] == [21, 22, 23, 24, 25, 26] and b["finish_reason"] == "length"
    assert a["logprobs"][0] == [[4, -0.1], [5, -2.5]]  # the top 2 only, in rank order
    assert a["env"]["engine"] == "llama.cpp" and a["env"]["version"] == "version: 0 (fake)"
    # no server is left listening: nothing of the fake is among the processes
    assert not any("fake_server.py" in _cmdline(p) for p in os.listdir("/proc") if p.isdigit())


def test_a_speculative_run_counts_forwards_from_the_accepted_drafts(fake_server, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    out = tmp_path / "ngram.jsonl"
    run = {"name": "ngram", "out": str(out), "speculative": "ngram", "k": 3}
    llamacpp.serve(fake_server, str(model), run, _prompts()[1:], threads=1, log=str(tmp_path / "s.log"))
    rec = json.loads(out.read_text())
    assert rec["forwards"] == 6 - 4 and rec["extra"]["draft_n_accepted"] == 4


def test_a_server_that_dies_at_start_is_named_with_its_log(fake_server, tmp_path):
    log = tmp_path / "s.log"
    with pytest.raises(llamacpp.ServerError, match="model file is not GGUF"):
        with llamacpp.Server(fake_server, lambda port: ["--die", "--port", str(port)], str(log)):
            pass


def test_a_port_taken_before_the_server_binds_it_is_retried_on_another(fake_server, tmp_path):
    ports = []

    def args(port):  # the first start finds its port taken (between choosing it and binding it)
        ports.append(port)
        return ["--port", str(port), "--host", "127.0.0.1", *(["--taken"] if len(ports) == 1 else [])]

    with llamacpp.Server(fake_server, args, str(tmp_path / "s.log")) as url:
        assert url.endswith(f":{ports[-1]}") and len(ports) == 2
    with pytest.raises(llamacpp.ServerError, match="couldn't bind"):  # taken every time: named, not looped
        with llamacpp.Server(fake_server, lambda port: ["--port", str(port), "--taken"], str(tmp_path / "t.log")):
            pass


def test_server_arguments_listen_on_the_loopback_and_name_the_method():
    args = llamacpp.server_args({"speculative": "draft_model", "k": 5, "draft": "d.gguf"}, "m.gguf", 1234, 2, 512)
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("-md") + 1] == "d.gguf"
    assert args[args.index("--spec-draft-n-max") + 1] == "5"
    with pytest.raises(llamacpp.LlamaCppError, match="speculative 'eagle3'"):
        llamacpp.server_args({"name": "x", "speculative": "eagle3"}, "m.gguf", 1, 1, 1)


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def llamacpp_server() -> str:
    """The built server, or a one-line failure saying why there is none (a skip would hide a broken arm)."""
    from orthrus.engines import runner

    server = os.environ.get(runner.SERVER_ENV) or str(ROOT / ".llamacpp" / "bin" / "llama-server")
    problem = runner.LLAMACPP_ENGINE.server_problem(server, ["tests/test_llamacpp.py"], convert=True)
    if problem:
        pytest.fail(f"llama.cpp's server unusable: {problem}", pytrace=False)
    return server


@pytest.mark.slow
def test_the_workflow_runs_llamacpp_greedy_and_sampled(tmp_path):
    """configs/llamacpp.yaml cut to two prompts a domain and 32 tokens: the shipped teacher and draft
    converted to GGUF by llama.cpp's converter, served plain, with n-gram speculation and with the draft
    model, greedy and sampled, through the workflow: every table has their rows, tokens per forward come
    from the server's counts, the verdicts from its own probabilities, and no server is left running."""
    import subprocess

    import pandas as pd
    import yaml

    from orthrus.plan.overlay import merge

    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg = merge(base, yaml.safe_load((ROOT / "configs/llamacpp.yaml").read_text()))  # the file is an overlay
    cfg["engines"] = {"llamacpp_server": llamacpp_server()}
    cfg["prompts"]["eval_per_domain"] = 2
    cfg["decode"]["max_new_tokens"] = 32
    keep = ("llamacpp-f32", "llamacpp-ngram-f32", "llamacpp-draft-f32", "llamacpp-bf16")
    cfg["decode"]["engines"] = {n: e for n, e in cfg["decode"]["engines"].items() if n in keep}
    # the same server through the OpenAI entry, at 1 and 4 requests in flight, with the planted control
    # (issue 54; configs/openai.yaml is the whole grid)
    under_load = {"engine": "openai", "launch": "llamacpp", "precision": "fp32", "concurrency": [1, 4], "repeats": 2}
    cfg["decode"]["engines"] |= {"oa-f32": under_load, "oa-planted-f32": under_load | {"planted": True}}
    cfg["decode"]["precisions"] = ["bf16", "fp32"]
    cfg["sampling"]["two_sample"] |= {"n_samples": 60, "domains": ["math", "qa"]}
    sampled_keep = ("llamacpp-plain", "llamacpp-plain-b", "llamacpp-ngram", "llamacpp-draft")
    cfg["sampling"]["engines"] = {n: e for n, e in cfg["sampling"]["engines"].items() if n in sampled_keep}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path)]
    res = subprocess.run(
        [*cmd, "--configfile", str(tmp_path / "config.yaml"), "--cores", "2"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    tables = tmp_path / "results" / "tables"
    decoders = pd.read_csv(tables / "decoders.csv").set_index("model")
    assert set(keep) <= set(decoders.index), sorted(decoders.index)
    assert decoders.loc["llamacpp-ngram-f32", "tpf_verify"] > 1 and decoders.loc["llamacpp-f32", "tpf_verify"] == 1
    assert decoders.loc["llamacpp-draft-f32", "tpf_verify"] > 1
    first = json.loads((tmp_path / "results/engine/llamacpp-bf16.jsonl").read_text().splitlines()[0])
    assert (
        first["env"]["weights"] == "BF16" and first["env"]["dtype"] == "bfloat16" and first["env"]["kv_cache"] == "f16"
    )
    assert all(len(top) == 2 for top in first["logprobs"])  # a plain run reports its top 2 everywhere
    load = [json.loads(x) for x in (tmp_path / "results/engine/oa-f32-c4.jsonl").read_text().splitlines()]
    assert load[0]["env"]["api"] == "llamacpp-completion" and load[0]["env"]["concurrency"] == 4
    assert max(n for r in load for n in r["extra"]["in_flight"]) > 1  # the load was real
    match = pd.read_csv(tables / "match_overall.csv").set_index("model")["match_rate"]
    forensics = pd.read_csv(tables / "forensics.csv").set_index("model")
    assert match["oa-planted-f32-c4"] < 1 and forensics.loc["oa-planted-f32-c4", "n_structural"] > 0  # caught
    load = pd.read_csv(tables / "load.csv").set_index("model")
    assert set(load.index) == {"oa-f32-c1", "oa-f32-c4", "oa-planted-f32-c1", "oa-planted-f32-c4"}
    assert load.loc["oa-f32-c4", "reference"] == "oa-f32-c1" and load.loc["oa-f32-c4", "repeats"] == 2
    claims = pd.read_csv(tables / "claims.csv")
    claims = claims[claims["source"] == "load.csv"].set_index("claim")
    assert claims.loc["planted-load-caught", "verdict"] == "holds"  # the planted control, caught by the claim
    assert claims.loc["load-invariant", "verdict"] in ("holds", "fails")  # tested, whatever llama-server does
    sampled = pd.read_csv(tables / "sampling_engines.csv")
    assert sorted(sampled["engine"].unique()) == ["llamacpp-draft", "llamacpp-ngram", "llamacpp-plain-b"]
    assert len(sampled) == 6
    assert sampled["p_value"].between(0, 1).all() and (sampled["engine_seed"] != sampled["reference_seed"]).all()
    assert not any("llama-server" in _cmdline(p) for p in os.listdir("/proc") if p.isdigit())


def test_probabilities_that_are_not_the_tokens_own_are_left_out():
    """The server drops the entry of a token that ends inside a UTF-8 character: each entry goes to the
    next token of its id, the dropped ones are empty, an ambiguous pair (a dropped token beside a
    matched one of its id) is empty both; entries that match no token leave a speculative record without
    logprobs and refuse a plain one."""
    prompt = _prompts()[1]
    e = lambda t: {"id": t, "top_logprobs": [{"id": t, "logprob": -0.5}, {"id": 0, "logprob": -1.0}]}  # noqa: E731
    toks = [155, 249, 80, 80, 21]  # 155 and the first 80 end inside a character: no entry
    top, aligned = llamacpp.align_probs(toks, [e(249), e(80), e(21)])
    assert aligned and top == [[], [[249, -0.5], [0, -1.0]], [], [], [[21, -0.5], [0, -1.0]]]
    shifted = {"tokens": [21, 22, 23], "completion_probabilities": [e(22), e(21)]}
    rec = llamacpp.greedy_record(prompt, shifted, {}, speculative=True)
    assert "logprobs" not in rec and rec["extra"]["probs_aligned"] is False
    with pytest.raises(llamacpp.LlamaCppError, match="are not its 3 tokens'"):
        llamacpp.greedy_record(prompt, shifted, {}, speculative=False)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_job_leaves_no_server(fake_server, tmp_path, signal_name):
    """The job that started a server is killed (SIGTERM: its `finally` stops it; SIGKILL: the kernel's
    parent-death signal does): the server is gone too."""
    import signal
    import subprocess
    import time

    script = tmp_path / "job.py"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(_prompts()[0]) + "\n")
    run = {"name": "x", "out": str(tmp_path / "x.jsonl"), "model": str(tmp_path / "m.gguf")}
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    script.write_text(
        "import json, sys, time\n"
        "from orthrus.engines import llamacpp\n"
        "llamacpp.post = lambda url, body: time.sleep(600)\n"  # the job hangs inside a request
        f"llamacpp.run_all({fake_server!r}, {str(prompts)!r}, [json.loads({json.dumps(json.dumps(run))})], 1)\n"
    )
    job = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _servers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _servers(tmp_path), "the fake server never started"
    time.sleep(1.0)  # started and healthy: the job now waits on its request
    job.send_signal(getattr(signal, signal_name))
    job.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _servers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _servers(tmp_path)


def _servers(tmp_path) -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit() and f"{tmp_path}/fake_server.py" in _cmdline(p)]
