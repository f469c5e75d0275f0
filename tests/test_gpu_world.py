"""The study on a GPU, checked on a CPU: the tf32 precision's flags, the SDPA kernel a cell's rows
record, the device every stage trains and decodes on, the default refused on a GPU, configs/gpu.yaml's
shapes and DAG, the speed table, and benchmarks/gpu_check.sh's CPU fallback (docs/GPU.md)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from helpers import descendants, kill, run_bounded, tiny_orthrus

from orthrus.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def test_tf32_is_a_precision_of_its_own_and_every_other_turns_it_off():
    """`tf32` is fp32 weights with TF32 products allowed; any other precision sets the flags back
    (they are process-wide), and the record says which was on."""
    from orthrus.models.precision import configure, dtype_name, numerical_env

    try:
        assert configure("tf32") is torch.float32
        env = numerical_env(dtype="tf32")
        assert env["tf32_matmul"] and env["tf32_cudnn"] and env["float32_matmul_precision"] == "high"
        assert env["dtype"] == "fp32"  # the dtype is fp32's; the cell's precision says tf32
        configure("fp32")
        env = numerical_env(dtype="fp32")
        assert not env["tf32_matmul"] and not env["tf32_cudnn"] and env["float32_matmul_precision"] == "highest"
        assert set(env["reduced_precision_reduction"]) == {"bf16", "fp16"}
        assert {"flash", "efficient", "cudnn", "math"} == set(env["sdpa_enabled"])
        assert "cublas_workspace_config" in env
        assert dtype_name(torch.float32) == "fp32"
    finally:
        configure("fp32")


def test_a_cells_rows_record_the_sdpa_kernel_its_calls_dispatched_to():
    """An sdpa cell's `env.sdpa_backends` counts its attention calls by the kernel torch chose (on
    this CPU, its flash kernel for every call); an eager cell makes none; the wrapper is gone after."""
    import torch.nn.functional as F

    from orthrus.decode.stage import decode_prompts
    from orthrus.options import DecodeOptions

    class Tok:
        def apply_chat_template(self, messages, **kw):
            return messages[-1]["content"]

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(x) for x in text.split()]}

    prompts = pd.DataFrame({"prompt_id": ["p0", "p1"], "domain": ["x", "x"], "prompt": ["5 6 7", "8 9 10 11"]})
    original = F.scaled_dot_product_attention
    backends = {}
    for attn in ("sdpa", "eager"):
        model = tiny_orthrus(0, 4, "noisy", attn=attn, noise=1e-2, peaked=1.0)
        options = DecodeOptions(decoder="orthrus", precision="fp32", attention=attn, max_new_tokens=6, message="none")
        rows = decode_prompts(model, Tok(), prompts, options, "m", progress=False)
        assert rows["error"].isna().all(), rows["error"].tolist()
        backends[attn] = json.loads(rows["env"].iloc[0])["sdpa_backends"]
    assert F.scaled_dot_product_attention is original
    assert backends["eager"] == {}
    layers = 2
    assert set(backends["sdpa"]) == {"flash_attention"} and backends["sdpa"]["flash_attention"] >= 2 * layers


def test_the_training_device_is_the_studys_and_a_missing_gpu_is_named(tmp_path):
    """Teacher and distillation train where they are told: `cpu` stays on the CPU, a CUDA device that
    is not there is refused naming it, before any work."""
    from orthrus.distill import dist
    from orthrus.world.teacher import train_teacher

    device, started = dist.init("cpu")
    assert device.type == "cpu" and not started
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="'cuda' asked for, but torch sees no CUDA device"):
            dist.init("cuda")
        with pytest.raises(InputError, match="device 'cuda:1' asked for, but torch sees no CUDA device"):
            train_teacher(
                {"steps": 1, "warmup_steps": 0, "eval_per_domain": 0}, tmp_path / "t", verbose=False, device="cuda:1"
            )
        assert not (tmp_path / "t").exists()
    with pytest.raises(InputError, match="auto, cpu, cuda or mps"):
        dist.init("tpu")


def test_the_speed_table_sets_each_cell_beside_the_reference_on_the_same_prompts():
    from orthrus.analysis.tpf import speed_table

    def rows(model, decoder, precision, times):
        return [
            {
                "model": model,
                "decoder": decoder,
                "precision": precision,
                "attention": "sdpa",
                "prompt_id": p,
                "tokens": [1] * n,
                "seconds": s,
            }
            for p, (n, s) in times.items()
        ]

    decode = pd.DataFrame(
        rows("t", "ar-ref", "bf16", {"a": (10, 1.0), "b": (10, 1.0), "c": (40, 1.0)})
        + rows("m", "orthrus", "bf16", {"a": (10, 0.25), "b": (10, 0.25)})
        + rows("m", "orthrus", "fp32", {"a": (10, 0.5)})  # no fp32 reference: no ratio
    )
    t = speed_table(decode).set_index(["decoder", "precision"])
    o = t.loc[("orthrus", "bf16")]
    assert (o.n, o.tokens, o.seconds, o.tokens_per_second) == (2, 20, 0.5, 40.0)
    assert o.ar_tokens_per_second == 10.0 and o.speedup == 4.0  # the reference on a and b only
    assert t.loc[("ar-ref", "bf16")].speedup == 1.0 and t.loc[("ar-ref", "bf16")].tokens_per_second == 20.0
    assert t.loc[("orthrus", "fp32")].n == 0 and pd.isna(t.loc[("orthrus", "fp32")].speedup)


def _dry(*configs, extra=()):
    cmd = ["snakemake", "-n", "-p", "--cores", "16", "--configfile", *configs, *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _shell(run) -> list[str]:
    """The jobs' shell commands of a dry run's output."""
    return [line.removeprefix("Shell command: ") for line in run.stdout.splitlines() if "Shell command: " in line]


def test_the_shipped_teacher_on_a_gpu_is_refused_naming_the_gpu_world():
    r = _dry("config.yaml", extra=["--config", "decode={device: cuda}"])
    assert r.returncode != 0
    assert "decode.device: 'cuda' with the shipped tiny teacher" in r.stderr + r.stdout
    assert "snakemake --configfile configs/gpu.yaml" in r.stderr + r.stdout


def test_the_default_keeps_every_stage_on_the_cpu():
    """On a GPU machine too: every job that runs a model is told `--device cpu`, the distillation
    included (it used to take any GPU it found)."""
    r = _dry("config.yaml")
    assert r.returncode == 0, r.stderr[-2000:]
    train = [line for line in _shell(r) if line.startswith("orthrus train ")]
    assert train and all("--device cpu" in line for line in train)
    assert "--device cuda" not in r.stdout


def test_the_gpu_world_has_qwen3_1_7b_shapes_and_trains_everything_on_the_gpu():
    from orthrus.plan.overlay import merge

    cfg = merge(
        yaml.safe_load((ROOT / "config.yaml").read_text()), yaml.safe_load((ROOT / "configs/gpu.yaml").read_text())
    )
    tiny, draft = cfg["teacher"]["tiny"], cfg["teacher"]["draft"]["tiny"]
    shapes = {k: tiny[k] for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")}
    assert shapes == {"hidden_size": 2048, "num_layers": 28, "num_heads": 16, "num_kv_heads": 8, "head_dim": 128}
    assert tiny["intermediate_size"] == 6144 and tiny["vocab_size"] == 2048 and cfg["teacher"]["source"] == "tiny"
    assert draft["num_layers"] < tiny["num_layers"] and draft["hidden_size"] < tiny["hidden_size"]
    assert set(cfg["decode"]["precisions"]) == {"bf16", "fp16", "fp32", "tf32"}
    assert set(cfg["decode"]["attentions"]) == {"eager", "sdpa"}
    r = _dry("configs/gpu.yaml")
    assert r.returncode == 0, r.stderr[-2000:]
    shell = _shell(r)
    for command in ("orthrus train-teacher", "orthrus corpus", "orthrus train ", "orthrus decode"):
        lines = [line for line in shell if line.startswith(command)]
        assert lines and all("--device cuda" in line for line in lines), command
    assert "tf32-sdpa" in r.stdout and "tf32-eager" in r.stdout and "results/tables/speed.csv" in r.stdout


def test_gpu_check_refuses_bad_options_naming_them():
    for args, said in (
        (["--frobnicate"], "unknown option --frobnicate"),
        (["--rehearsal", "maybe"], "--rehearsal must be run, dry or skip, got maybe"),
        (["--world-seconds", "0"], "positive whole number, got 0"),
    ):
        r = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_check.sh"), *args], capture_output=True, text=True)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr)


def test_a_bounded_run_past_its_time_fails_naming_its_processes_and_kills_them():
    """The bound the slow test below keeps: past it, the test fails naming what still ran (a child
    in a session of its own among them), and none of it is left."""
    with pytest.raises(pytest.fail.Exception) as failed:
        run_bounded(["bash", "-c", "setsid sleep 37 & sleep 38"], 2)
    said = str(failed.value)
    assert "still ran after 2 s" in said and "sleep 37" in said and "sleep 38" in said
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", "^sleep 3[78]$"], capture_output=True).returncode == 1  # none found


def test_gpu_check_stops_a_part_at_its_limit_and_passes_an_interrupt_on(tmp_path):
    """A part past its limit gets SIGINT (Snakemake's cue to stop its jobs and remove their partial
    outputs) and is named in status.txt; an interrupt of the script itself reaches the part at once
    (`timeout` keeps the part in a process group of its own, which a terminal's ^C misses). The part
    is a stand-in for Snakemake that says when it started and when it was interrupted."""
    fake, out, mark = tmp_path / "bin", tmp_path / "record", tmp_path / "mark"
    fake.mkdir()
    (fake / "snakemake").write_text(
        '#!/bin/sh\ntrap \'echo interrupted >> "$MARK"; exit 130\' INT\necho started >> "$MARK"\nsleep 120\n'
    )
    (fake / "snakemake").chmod(0o755)
    env = dict(
        os.environ,
        MARK=str(mark),
        PATH=os.pathsep.join([str(fake), str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    cmd = [
        "bash",
        str(ROOT / "benchmarks/gpu_check.sh"),
        "--out",
        str(out),
        "--work",
        str(tmp_path / "w"),
        "--rehearsal",
        "skip",
    ]
    r = run_bounded([*cmd, "--world-seconds", "2"], 90, cwd=tmp_path, env=env)
    assert r.returncode == 1 and (out / "status.txt").read_text().startswith("world: over its limit of 2 s"), r.stderr
    said = mark.read_text().split()  # timeout signals the part and then its group: one or two interrupts
    assert said[0] == "started" and set(said[1:]) == {"interrupted"}, said

    mark.unlink()
    # as from a terminal: a test run started in the background ignores SIGINT, and a shell that starts
    # with it ignored may not trap it
    p = subprocess.Popen(
        [*cmd, "--world-seconds", "600"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for _ in range(600):
            if mark.exists() or p.poll() is not None:
                break
            time.sleep(0.1)
        assert mark.exists(), "the stand-in never started"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 130
    finally:
        kill([p.pid, *descendants(p.pid)])  # a script that failed leaves none behind
    said = mark.read_text().split()
    assert said[0] == "started" and set(said[1:]) == {"interrupted"}, said


@pytest.mark.slow
def test_gpu_check_falls_back_to_the_smallest_world_on_a_cpu_and_writes_the_record(tmp_path):
    """The script's rehearsal before anyone spends GPU time: without CUDA it says so, runs the
    smallest form of the GPU world for real (every precision, tf32 among them) and the paper
    rehearsal dry, and writes the record with the claims, the speed table and each stage's time."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the script would run the full GPU world, not its CPU fallback")
    out, work = tmp_path / "record", tmp_path / "work"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    # the script bounds each part itself (a world of about 150 s here under 900, a dry rehearsal of about
    # 10 under 300, each killed 30 s past its limit); this bound is the test's own, for a script that
    # broke its limits
    r = run_bounded(
        [
            "bash",
            str(ROOT / "benchmarks/gpu_check.sh"),
            "--out",
            str(out),
            "--work",
            str(work),
            "--cores",
            "2",
            "--world-seconds",
            "900",
            "--rehearsal-seconds",
            "300",
        ],
        900 + 300 + 240,
        logs=[out / "status.txt", out / "world.log", out / "rehearsal.log"],
        cwd=tmp_path,
        env=env,
    )
    status = (out / "status.txt").read_text() if (out / "status.txt").exists() else ""
    assert r.returncode == 0, (r.stderr[-3000:], status)
    assert "no CUDA device here; running the smallest form" in r.stderr
    assert status.startswith("world: ok") and "rehearsal: ok" in status
    env_record = json.loads((out / "environment.json").read_text())
    assert env_record["device"] == "cpu" and "not a GPU record" in env_record["note"]
    assert env_record["study_fp32"]["tf32_matmul"] is False
    claims = pd.read_csv(out / "world/claims.csv")
    assert {"fp32-exact", "tf32-exact", "bf16-inexact", "planted-bug-caught"} <= set(claims["claim"])
    speed = pd.read_csv(out / "world/speed.csv")
    assert set(speed["precision"]) == {"bf16", "fp32", "tf32"}  # the smallest form leaves fp16 out
    assert (speed.loc[speed["decoder"] == "ar-ref", "speedup"] == 1).all()
    decode = pd.read_parquet(work / "world/results/decode/ce-k8/orthrus-tf32-sdpa.parquet")
    env_row = json.loads(decode["env"].iloc[0])
    assert env_row["tf32_matmul"] is True and sum(env_row["sdpa_backends"].values()) > 0
    times = (out / "world/stage_times.txt").read_text()
    assert "train_teacher" in times and "decode" in times


def test_the_step_sums_reach_nccl_on_the_gpu_and_come_back(monkeypatch):
    """Under torchrun on GPUs the group is NCCL, which reduces device tensors only: the step's host
    sums go to the process's GPU for the all_reduce and come back summed, in place (NCCL and the GPU
    stood in for by fakes that record what they were handed)."""
    import torch.distributed as tdist

    from orthrus.distill import dist

    moved, reduced = [], []

    def to_gpu(self):
        moved.append(self)
        return self.clone()

    def all_reduce(t):
        reduced.append(t)
        t.mul_(2)  # two processes with the same sums

    monkeypatch.setattr(dist, "world", lambda: 2)
    monkeypatch.setattr(tdist, "get_backend", lambda: "nccl")
    monkeypatch.setattr(tdist, "all_reduce", all_reduce)
    monkeypatch.setattr(torch.Tensor, "cuda", to_gpu)
    sums = torch.tensor([1.0, 2.5], dtype=torch.float64)
    assert dist.all_reduce_sum(sums) is sums and sums.tolist() == [2.0, 5.0]
    assert moved == [sums] and reduced and reduced[0] is not sums  # the copy was reduced, not the host tensor
    monkeypatch.setattr(tdist, "get_backend", lambda: "gloo")
    dist.all_reduce_sum(sums)
    assert reduced[-1] is sums and len(moved) == 1  # gloo reduces the host tensor itself
