"""The paper configuration, executed: configs/paper.yaml with configs/rehearsal.yaml's stand-ins runs
every rule of the paper DAG for real on this CPU (a dry run cannot see what breaks when jobs run)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from orthrus import contracts
from orthrus.options import DecodeOptions

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "configs/paper.yaml"


def _env():
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TQDM_DISABLE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def paper_rules(cwd) -> set[str]:
    """The rules of the paper DAG, from a dry run of configs/paper.yaml alone (its job stats)."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(cwd),
            "-n",
            "--configfile",
            str(PAPER),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    stats = res.stdout.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+$", stats, re.M)}


def executed_rules(work: Path) -> set[str]:
    """The rules whose jobs ran (and finished), from the run's Snakemake logs."""
    text = "".join(p.read_text(errors="replace") for p in (work / ".snakemake" / "log").glob("*.log"))
    return set(re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", text, re.M))


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    work = tmp_path_factory.mktemp("rehearsal")
    res = subprocess.run(
        ["bash", str(ROOT / "workflow/scripts/rehearse.sh"), str(work)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=2400,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    return work, res


@pytest.mark.slow
def test_the_rehearsal_executes_every_rule_of_the_paper_dag(rehearsal, tmp_path):
    work, _ = rehearsal
    want = paper_rules(tmp_path) - {"all"}
    ran = executed_rules(work)
    assert want and not want - ran, f"rules of the paper DAG the rehearsal never ran: {sorted(want - ran)}"


@pytest.mark.slow
def test_the_rehearsal_writes_every_table_and_the_report(rehearsal):
    work, res = rehearsal
    tables = work / "results" / "tables"
    for name in [*contracts.TABLES, *contracts.BENCHMARK_TABLES]:
        assert (tables / name).exists(), name
    assert (work / "results" / "report.html").stat().st_size > 0
    # Table 7 under the safe default: GSM8K and IFEval for every model, HumanEval left out and said so
    bench = pd.read_csv(tables / "benchmarks.csv")
    paper = yaml.safe_load(PAPER.read_text())
    models = {paper["teacher"]["name"], *paper["models"], *paper["external_models"]}
    assert set(bench.task) == {"gsm8k", "ifeval"} and set(bench.model) == models
    assert "humaneval left out" in res.stderr
    # every decoder, precision and model of the paper grid, with the options the paper sets
    overall = pd.read_csv(tables / "match_overall.csv")
    assert set(overall.precision) == {"bf16", "fp16", "fp32"}
    assert set(overall.decoder) == {"orthrus", "ar", "assisted", "prompt-lookup", "oracle", "ar-batched"}
    assert set(overall.model) == models
    rows = pd.read_parquet(work / "results/decode/ZaryaOrthrus-1.7B/orthrus-bf16-eager.parquet")
    opts = DecodeOptions.from_row(rows.env.iloc[0], "orthrus", "bf16", "eager")
    assert (opts.eos, opts.last_block, opts.prefill_logits, opts.deterministic) == ("config", "shorten", "all", False)
    tpf = pd.read_csv(tables / "tpf_by_domain.csv")
    assert {(r.message, r.max_new_tokens) for r in tpf.itertuples()} >= {("none", 24), ("empty", 16)}
    record = json.loads((work / "results/benchmarks/Orthrus-1.7B-final/orthrus-bf16-eager.json").read_text())
    assert record["settings"]["options"]["eos"] == "config" and not record["settings"]["chat_template"]


@pytest.mark.slow
def test_the_gpu_script_falls_back_to_the_cpu_and_plans_the_paper_dag(tmp_path):
    """benchmarks/gpu_rehearsal.sh without CUDA: it says so, writes its overlay for the CPU and plans
    the rehearsal (a dry run: the real one is the slow test above); with CUDA it would run there."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: run benchmarks/gpu_rehearsal.sh itself")
    res = subprocess.run(
        ["bash", str(ROOT / "benchmarks/gpu_rehearsal.sh"), str(tmp_path / "g"), "-n"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "no CUDA device here" in res.stderr
    overlay = yaml.safe_load((tmp_path / "g" / "gpu.yaml").read_text())
    assert overlay["decode"]["device"] == "cpu" and overlay["decode"]["attentions"][:2] == ["eager", "sdpa"]
    # the TPF run on both CPU kernels for the four Orthrus models
    assert re.search(r"^tpf_decode\s+8$", res.stdout, re.M) and "This was a dry-run" in res.stdout
