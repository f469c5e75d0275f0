"""The Snakemake workflow: schema validation, dry runs, lint, and one end-to-end smoke study."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "tests" / "smoke" / "config.yaml"


def snakemake(*args, cwd, timeout=600):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(cwd), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def workdir_with(tmp_path, cfg: dict) -> Path:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path


def default_config():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def unkind(text: str) -> str:
    """A dry run's text with the study's CPU kind taken out of its commands (`orthrus --cpu-kind native
    decode`: machine.kinds), for the tests that find a command by its name."""
    return re.sub(r"orthrus --cpu-kind \S+ ", "orthrus ", text)


def test_schema_vocabularies_are_the_contracts():
    """Every precision, attention and decoder enum of the config schema is a subset of
    orthrus.contracts' vocabulary, and the full lists appear (the workflow's wildcards use them)."""
    from orthrus import contracts

    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    enums = []

    def walk(node):
        if isinstance(node, dict):
            if "enum" in node:
                enums.append(tuple(node["enum"]))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    precision = [e for e in enums if "fp32" in e]
    attention = [e for e in enums if "eager" in e]
    decoders = [e for e in enums if "prompt-lookup" in e]
    assert precision and attention and decoders
    assert all(set(e) <= set(contracts.PRECISIONS) for e in precision) and contracts.PRECISIONS in precision
    assert all(set(e) <= set(contracts.ATTENTIONS) for e in attention) and contracts.ATTENTIONS in attention
    assert all(set(e) <= set(contracts.DECODERS) for e in decoders)
    assert set(schema["$defs"]["Decode"]["properties"]["decoders"]["items"]["enum"]) <= set(contracts.SPECULATIVE)


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["teacher"].__setitem__("source", 42), "source"),
        (lambda c: c.__setitem__("unknown_key", 1), "unknown_key"),
        (lambda c: c["decode"].__setitem__("precisions", ["fp8"]), "fp8"),
        (lambda c: c.pop("decode"), "decode"),
        (lambda c: c["decode"].__setitem__("decoders", ["medusa"]), "medusa"),
        # a hub draft cannot share the tiny teacher's tokenizer: rejected naming both
        (
            lambda c: (
                c["decode"].__setitem__("decoders", ["assisted"]),
                c["teacher"].__setitem__("draft", {"source": "hf", "path": "Qwen/Qwen3-0.6B"}),
            ),
            "teacher.draft.path='Qwen/Qwen3-0.6B' cannot share the tokenizer of the tiny teacher teacher.source='shipped'",
        ),
        # the shipped draft has the shipped teacher's tokenizer
        (
            lambda c: c["teacher"].update(source="hf", path="Qwen/Qwen3-1.7B"),
            "teacher.draft.source: the shipped draft has the shipped teacher's tokenizer, not that of teacher.source='hf'",
        ),
        (
            lambda c: (c["decode"].__setitem__("decoders", ["assisted"]), c["teacher"].pop("draft")),
            "needs teacher.draft",
        ),
        # the planted sampler's bug (q at temperature 1) is none at temperature 1: the config check says so
        (
            lambda c: c["sampling"].update(enabled=True) or c["sampling"]["two_sample"].__setitem__("temperature", 1.0),
            "sampling.two_sample.temperature",
        ),
    ],
)
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path, mutate, message):
    cfg = default_config()
    mutate(cfg)
    res = snakemake("-n", cwd=workdir_with(tmp_path, cfg))
    assert res.returncode != 0
    assert message in res.stdout + res.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_default_and_paper_dry_runs(tmp_path):
    res = snakemake("-n", cwd=workdir_with(tmp_path, default_config()))
    assert res.returncode == 0, res.stderr[-2000:]
    for rule in ("corpus_shard", "train", "decode_shard", "forensics", "analyze", "figures"):
        assert re.search(rf"^{rule}\s+\d+", res.stdout, re.M), f"{rule} missing from the default DAG"
    # the shipped subject: neither the teacher nor the draft is trained
    assert not re.search(r"^train_(teacher|draft)\s", res.stdout, re.M)
    # transformers' speculative decoders on the teacher (assisted with its draft), over their
    # decode.grids grid, and their forensics; one decoding job per cell
    decode = default_config()["decode"]
    for decoder in ("assisted", "prompt-lookup"):
        grid = {
            "precisions": decode["precisions"],
            "attentions": decode["attentions"],
            **decode["grids"].get(decoder, {}),
        }
        for p in decode["precisions"]:
            for a in decode["attentions"]:
                wanted = p in grid["precisions"] and a in grid["attentions"]
                assert (f"results/decode/teacher/{decoder}-{p}-{a}.parquet" in res.stdout) == wanted, (decoder, p, a)
    cells = int(re.search(r"^decode\s+(\d+)$", res.stdout, re.M).group(1))
    assert re.search(rf"^decode_shard\s+{cells}$", res.stdout, re.M)
    assert re.search(r"^frontier\s+1$", res.stdout, re.M) and "results/tables/exactness_cost.csv" in res.stdout
    # the sampling audit on ce-k8 (the plan's sampling outputs are tested in tests/test_plan.py)
    assert re.search(r"^sampling\s+1$", res.stdout, re.M) and "results/tables/sampling_tv.csv" in res.stdout
    assert "results/forensics/teacher.parquet" in res.stdout and "results/tables/decoders.csv" in res.stdout
    # the machine axis (machine.*, docs/MACHINES.md): the bf16 Orthrus cells and their reference decoded again
    # under avx2, every environment's probe and claims, one comparison, which the study's claims read
    assert re.search(r"^machine_decode\s+3$", res.stdout, re.M) and re.search(r"^machine_probe\s+2$", res.stdout, re.M)
    claims = re.search(r"^(?:local)?rule claims:\n    input: (.*)$", res.stdout, re.M).group(1).split(", ")
    assert {"results/tables/verdicts_by_env.csv", "results/tables/machine_probes.csv"} <= set(claims)
    # the schedule (docs/SPEED.md): a gather runs as soon as its shards end (it once waited minutes
    # behind them, holding the oracle and forensics), the long chain before the table-only jobs
    prio = _priorities(res.stdout)
    assert min(prio["decode"]) > max(prio["decode_shard"]) > max(prio["lm_eval"] | prio["sampling"] | prio["frontier"])
    assert min(prio["train"]) > max(prio["decode_shard"]) and min(prio["forensics"]) > max(prio["lm_eval"])
    paper = snakemake("-n", "--configfile", str(ROOT / "configs/paper.yaml"), cwd=tmp_path)
    assert paper.returncode == 0, paper.stderr[-2000:]
    # (reference + assisted + prompt-lookup + the oracle and batched controls + 4 Orthrus models x 2 decoders)
    # x 3 precisions, each cell in 12 shards
    assert re.search(r"^decode\s+39$", paper.stdout, re.M) and re.search(r"^decode_shard\s+468$", paper.stdout, re.M)
    assert "results/frontier/ZaryaOrthrus-1.7B.parquet" in paper.stdout
    assert not re.search(r"^train_draft", paper.stdout, re.M)  # the hub draft is not trained
    # the authors' protocol: Table 2 as a separate run per Orthrus model; the corpus read from
    # the hub in 64 shards (no generation), the benchmarks' AR baseline through HF generate
    assert re.search(r"^tpf_decode\s+4$", paper.stdout, re.M)
    assert re.search(r"^corpus_shard\s+64$", paper.stdout, re.M)
    shown = snakemake("-n", "-p", "--configfile", str(ROOT / "configs/paper.yaml"), cwd=tmp_path).stdout
    assert (
        "--dataset ai-forever/ZaryaOrthrusDataset-1.7B --dataset-split train"
        " --datasets-cache results/cache/datasets --message none"
    ) in shown  # the cache under results/
    # every loop gets the whole options object: the released loop's settings for our loop, transformers'
    # own for its decoders, tpf's budget and message on top of decode's for the TPF run
    from orthrus.options import DecodeOptions

    cmds = [c[c.index("orthrus ") :] for c in shown.splitlines() if "orthrus decode" in c or "orthrus lm-eval run" in c]
    opts = [
        (c.split()[1], DecodeOptions.from_json(j)) for c in cmds for j in re.findall(r"'(\{\"attention\"[^']*\})'", c)
    ]
    loop = [o for _, o in opts if o.decoder in ("orthrus", "ar")]
    assert loop and all(
        (o.eos, o.last_block, o.prefill_logits, o.deterministic) == ("config", "shorten", "all", False) for o in loop
    )
    assert all(o.eos == "generation_config" and not o.deterministic for _, o in opts if o.decoder == "ar-ref")
    assert {o.max_new_tokens for o in loop} == {128, 256} and any(o.message == "none" for o in loop)
    assert (
        "lm-eval",
        DecodeOptions.from_config(
            yaml.safe_load((ROOT / "configs/paper.yaml").read_text())["decode"], "ar-ref", "bf16", "eager"
        ),
    ) in opts
    assert "--max-gen-toks task --no-chat-template" in shown
    assert "--draft-path Qwen/Qwen3-0.6B" in shown and any(o.decoder == "prompt-lookup" for _, o in opts)


@pytest.mark.slow
def test_the_global_seed_reaches_every_stage_that_draws(tmp_path):
    """`--config seed=N` is another realisation of the study on the same subject: the prompts,
    every variant's distillation (its own seed plus the global one) and the tiny benchmark
    documents get it, the shipped teacher and draft are not trained at all; with teacher.source
    tiny the teacher (its initialisation, tokenizer and data) and the draft get it too. Seed 0
    leaves each variant's own seed as it is."""
    cfg = default_config()
    cfg["decode"]["decoders"] = ["assisted", "prompt-lookup"]
    cfg["models"]["kl-k8"]["seed"] = 5
    work = workdir_with(tmp_path, cfg)
    shown = snakemake("-n", "-p", "--config", "seed=3", cwd=work)
    assert shown.returncode == 0, shown.stderr[-2000:]
    cmds = [c[c.index("orthrus ") :] for c in unkind(shown.stdout).splitlines() if "Shell command: orthrus " in c]
    by = lambda prefix: [c for c in cmds if c.startswith(prefix)]
    assert not by("orthrus train-teacher")  # the shipped subject
    teacher = str(ROOT / "orthrus/world/subject/teacher")
    assert all(f"--teacher {teacher} " in c for c in by("orthrus train ") + by("orthrus corpus"))
    assert any(f"--model-path {teacher} " in c for c in by("orthrus decode"))
    assert any(f"--draft-path {ROOT / 'orthrus/world/subject/draft'}" in c for c in by("orthrus decode"))
    tiny = snakemake(
        "-n", "-p", "--config", "seed=3", 'teacher={"source": "tiny", "draft": {"source": "tiny"}}', cwd=work
    )
    assert tiny.returncode == 0, tiny.stderr[-2000:]
    trains = [c for c in tiny.stdout.splitlines() if "Shell command: orthrus train-teacher" in c]
    assert len(trains) == 2 and all("--seed 3 " in c for c in trains)
    assert by("orthrus prompts") and all("--seed 3 " in c for c in by("orthrus prompts"))
    assert by("orthrus lm-eval prepare-data") and all("--seed 3 " in c for c in by("orthrus lm-eval prepare-data"))
    # the documents per task reach the data: one count, or (benchmarks.n_docs as a mapping) one per task
    assert all(f"--n {cfg['benchmarks']['n_docs']} " in c for c in by("orthrus lm-eval prepare-data"))
    per_task = snakemake("-n", "-p", "--config", 'benchmarks={"n_docs": {"tiny_code": 7, "tiny_qa": 5}}', cwd=work)
    assert per_task.returncode == 0, per_task.stderr[-2000:]
    assert "--n tiny_code=7,tiny_qa=5 " in per_task.stdout
    assert by("orthrus lm-eval run") and all("--seed 3 " in c for c in by("orthrus lm-eval run"))
    train = {re.search(r"--out results/models/(\S+)", c).group(1): c for c in by("orthrus train ")}
    assert '"seed": 3' in train["ce-k8"] and '"seed": 8' in train["kl-k8"], train
    plain = snakemake("-n", "-p", cwd=work)
    train0 = [c for c in plain.stdout.splitlines() if "Shell command: orthrus train " in c]
    assert any('"seed": 0' in c for c in train0) and any('"seed": 5' in c for c in train0)


DECODED = re.compile(r"results/decode/([^/\s,]+)/([a-z-]+)-(bf16|fp16|fp32)-(eager|sdpa|flash_attention_2)\.parquet")


def _cells(dry_run: str, model: str) -> set[tuple]:
    """(decoder, precision, attention) of the options every `orthrus decode` of `model` is given."""
    from orthrus.options import DecodeOptions

    cmds = [c for c in unkind(dry_run).splitlines() if "orthrus decode" in c and f"--model-name {model} " in c]
    return {
        (o.decoder, o.precision, o.attention)
        for c in cmds
        for o in map(DecodeOptions.from_json, re.findall(r"'(\{\"attention\"[^']*\})'", c))
    }


def _jobs(dry_run: str) -> dict[str, str]:
    """{output file: rule} of the jobs a `snakemake -n` prints."""
    out = {}
    for block in dry_run.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        outputs = re.search(r"^    output: (.*)$", block, re.M)
        for f in outputs.group(1).split(", ") if outputs else []:
            out[f] = rule
    return out


def _priorities(dry_run: str) -> dict[str, set[int]]:
    """{rule: the priorities of its jobs} in a `snakemake -n` (a job without a `priority:` line has 0)."""
    out = {}
    for block in dry_run.split("\nrule ")[1:]:
        p = re.search(r"^    priority: (\d+)$", block, re.M)
        out.setdefault(block.split(":", 1)[0], set()).add(int(p.group(1)) if p else 0)
    return out


@pytest.mark.slow
def test_decode_grids_narrow_an_orthrus_model(tmp_path):
    """decode.grids narrows one Orthrus model (smoke-kl: sdpa only): its Orthrus loop, AR view and
    forensics run exactly there; smoke-klb (a name it begins) and smoke-ce keep the full grid, and
    so does the ar-ref reference. One decoding job per cell."""
    cfg = yaml.safe_load(SMOKE.read_text())
    ce = cfg["models"]["smoke-ce"]
    cfg["models"] = {"smoke-ce": ce, "smoke-kl": {**ce, "objective": "kl"}, "smoke-klb": ce}
    cfg["decode"]["grids"] = {
        "prompt-lookup": {"attentions": ["sdpa"], "prompts_per_domain": 2},
        "assisted": {"prompts_per_domain": {"fp32": 3}},
        "smoke-kl": {"attentions": ["sdpa"]},
    }
    cfg["decode"]["controls"] = []  # test_controls_join_the_dag
    cfg["decode"]["external"] = {}  # test_engine_files_join_the_dag
    work = workdir_with(tmp_path, cfg)
    res = snakemake("-n", "-p", cwd=work)
    assert res.returncode == 0, res.stderr[-2000:]
    # prompts_per_domain: prompt-lookup's jobs decode the first 2 prompts of each domain, no other's
    commands = [c for c in unkind(res.stdout).splitlines() if "orthrus decode " in c]
    subset = [c for c in commands if "--prompts-per-domain 2" in c]
    assert subset and all('"decoder": "prompt-lookup"' in c for c in subset)
    assert len(subset) == len([c for c in commands if '"decoder": "prompt-lookup"' in c])
    # a count per precision: assisted's fp32 cells decode 3 prompts per domain, its bf16 cells all
    assisted = [c for c in commands if '"decoder": "assisted"' in c]
    assert {('"precision": "fp32"' in c, "--prompts-per-domain 3" in c) for c in assisted} == {
        (True, True),
        (False, False),
    }
    assert not any("--prompts-per-domain" in c for c in assisted if '"precision": "bf16"' in c)
    full = [(p, a) for p in ("bf16", "fp32") for a in ("eager", "sdpa")]
    sdpa = [(p, "sdpa") for p in ("bf16", "fp32")]
    want = (
        {("teacher", d, p, a) for d in ("ar-ref", "assisted") for p, a in full}
        | {("teacher", "prompt-lookup", p, a) for p, a in sdpa}
        | {(m, d, p, a) for m in ("smoke-ce", "smoke-klb") for d in ("orthrus", "ar") for p, a in full}
        | {("smoke-kl", d, p, a) for d in ("orthrus", "ar") for p, a in sdpa}
    )
    assert set(DECODED.findall(res.stdout)) == want
    forensics = re.search(r"^    input: (.*)\n    output: results/forensics/smoke-kl\.parquet$", res.stdout, re.M)
    assert set(DECODED.findall(forensics.group(1))) == (
        {("smoke-kl", "orthrus", p, a) for p, a in sdpa} | {("teacher", "ar-ref", p, a) for p, a in sdpa}
    )
    jobs = _jobs(res.stdout)
    shards = {f: r for f, r in jobs.items() if "/shards/" in f}
    assert len(shards) == len(want) and set(shards.values()) == {"decode_shard"}
    assert _cells(res.stdout, "smoke-kl") == {("orthrus", p, a) for p, a in sdpa} | {("ar", p, a) for p, a in sdpa}
    assert _cells(res.stdout, "smoke-klb") == {(d, p, a) for d in ("orthrus", "ar") for p, a in full}


@pytest.mark.slow
def test_controls_join_the_dag(tmp_path):
    """decode.controls: the oracle and ar-batched decode on the teacher, the oracle reading the
    ar-ref reference of each of its cells; orthrus-lossy runs on each Orthrus model over that
    model's grid (in its rule), unless decode.grids narrows the control itself; the forensics
    explain each of them."""
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["decode"]["decoders"] = []
    cfg["decode"]["controls"] = ["oracle", "ar-batched", "orthrus-lossy"]
    cfg["decode"]["grids"] = {"oracle": {"precisions": ["bf16"]}, "smoke-kl": {"attentions": ["sdpa"]}}
    cfg["decode"]["external"] = {}
    res = snakemake("-n", "-p", cwd=workdir_with(tmp_path, cfg))
    assert res.returncode == 0, res.stderr[-2000:]
    full = [(p, a) for p in ("bf16", "fp32") for a in ("eager", "sdpa")]
    sdpa = [(p, "sdpa") for p in ("bf16", "fp32")]
    decoded = set(DECODED.findall(res.stdout))
    assert {c for c in decoded if c[1] == "oracle"} == {("teacher", "oracle", "bf16", a) for a in ("eager", "sdpa")}
    assert {c for c in decoded if c[1] == "ar-batched"} == {("teacher", "ar-batched", p, a) for p, a in full}
    assert {c for c in decoded if c[1] == "orthrus-lossy"} == (
        {("smoke-ce", "orthrus-lossy", p, a) for p, a in full} | {("smoke-kl", "orthrus-lossy", p, a) for p, a in sdpa}
    )
    for a in ("eager", "sdpa"):  # each oracle cell reads the reference of its own cell
        job = re.search(
            rf"^    input: (.*)\n    output: (results/decode/teacher/shards/oracle-bf16-{a}\S*)", res.stdout, re.M
        )
        assert {c for c in DECODED.findall(job.group(1)) if c[1] == "ar-ref"} == {("teacher", "ar-ref", "bf16", a)}
        assert re.search(rf"--reference results/decode/teacher/ar-ref-bf16-{a}\.parquet\s+--shard", res.stdout)
    assert '"batch_size": 4' in res.stdout and '"block_size": 4, "decoder": "oracle"' in res.stdout
    for model, wanted in (("teacher", {"oracle", "ar-batched"}), ("smoke-kl", {"orthrus", "orthrus-lossy"})):
        job = re.search(rf"^    input: (.*)\n    output: results/forensics/{model}\.parquet$", res.stdout, re.M)
        assert {d for _, d, _, _ in DECODED.findall(job.group(1))} == wanted | {"ar-ref"}


def _engine_file(path, dtype="float32", kernel="eager"):
    """A trajectory file as an engine writes it (its contents are checked by the ingest job, not here)."""
    env = {"engine": "vllm", "dtype": dtype, "kernel": kernel}
    path.write_text(json.dumps({"prompt_id": "x", "token_ids": [], "env": env}) + "\n")
    return str(path)


@pytest.mark.slow
def test_engine_files_join_the_dag(tmp_path):
    """decode.external: each file is ingested as decoder `external` at its cell (the entry's, else its
    env's), joins the analysis, and its forensics compare it with its reference: the ar-ref of its
    cell, or for an engine pair the engine's own plain run, whose responses the perplexity job scores;
    the stand-in entries' files are written from the exported prompts."""
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["decode"]["controls"] = []
    cfg["decode"]["external"] |= {
        "vllm-ar": {"path": _engine_file(tmp_path / "vllm ar.jsonl")},  # fp32/eager from its env
        "vllm-eagle": {
            "path": _engine_file(tmp_path / "eagle.jsonl", "bfloat16", "FLASH_ATTN"),
            "attention": "sdpa",
            "reference": "vllm-ar",
        },
    }
    res = snakemake("-n", "-p", cwd=workdir_with(tmp_path, cfg))
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = _jobs(res.stdout)
    ingested = {f for f, r in jobs.items() if r == "ingest_external"}
    assert ingested == {
        "results/decode/vllm-ar/external-fp32-eager.parquet",
        "results/decode/vllm-eagle/external-bf16-sdpa.parquet",
        "results/decode/engine-ar/external-bf16-sdpa.parquet",
        "results/decode/engine-pld/external-bf16-sdpa.parquet",
    }
    assert {f for f, r in jobs.items() if r == "engine_transformers"} == {  # the stand-ins: one engine, one job
        "results/engine/ar.jsonl",
        "results/engine/pld.jsonl",
    }
    prio = _priorities(res.stdout)  # an engine file's ingest and forensics are scheduled as a cell's
    assert min(prio["ingest_external"]) == min(prio["decode"]) and prio["forensics_external"] == prio["forensics"]
    assert "--file '" + str(tmp_path / "vllm ar.jsonl") + "' --name vllm-ar" in res.stdout
    assert "--name vllm-eagle" in res.stdout and "--reference vllm-ar --out results/decode/vllm-eagle/" in res.stdout
    for name, ref in (
        ("vllm-ar", "results/decode/teacher/ar-ref-fp32-eager.parquet"),
        ("vllm-eagle", "results/decode/vllm-ar/external-fp32-eager.parquet"),
        ("engine-pld", "results/decode/engine-ar/external-bf16-sdpa.parquet"),
    ):
        assert re.search(
            rf"--decoded results/decode/{name}/external-\S+ --reference {re.escape(ref)} .*"
            rf"--out results/forensics/external/{name}\.parquet",
            res.stdout,
        ), name
    analyze = re.search(r"^    input: (.*)\n    output: results/tables/trajectories", res.stdout, re.M).group(1)
    assert ingested <= set(analyze.split(", "))
    perplexity = [c for c in unkind(res.stdout).splitlines() if "orthrus perplexity" in c][0]
    assert "results/decode/vllm-ar/external-fp32-eager.parquet" in perplexity and "engine-ar/external" in perplexity
    assert "vllm-eagle" not in perplexity  # only the declared references are scored beside ar-ref
    # the prompts for an engine on their own
    alone = snakemake(
        "-n",
        "results/export/prompts.jsonl",
        cwd=workdir_with(tmp_path, {**cfg, "decode": {**cfg["decode"], "external": {}}}),
    )
    assert alone.returncode == 0 and re.search(r"^export_prompts\s+1$", alone.stdout, re.M), alone.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry, message",
    [
        ({"path": "missing.jsonl"}, "decode.external.e.path: no such file: 'missing.jsonl'"),
        (
            {"path": "FILE", "reference": "nope"},
            "decode.external.e.reference: 'nope' is not an entry of decode.external",
        ),
        ({"path": "FILE", "reference": "e"}, "decode.external.e.reference: the entry itself"),
        ({"path": "FILE", "precision": "fp16"}, "decode.external.e.precision: 'fp16' not in decode.precisions"),
        (
            {"path": "FILE", "stand_in": "ar-ref"},
            "decode.external.e.precision: required with decode.external.e.stand_in",
        ),
        ({"path": "FILE", "kernel": "sdpa"}, "decode.external.e.kernel: unknown key"),
        ({"path": "KERNEL"}, "decode.external.e.attention: not set, and the first record of"),
        ({"path": "FILE", "name": "teacher"}, "decode.external.teacher: same name as teacher.name"),
    ],
)
def test_a_bad_engine_entry_fails_before_any_job_naming_the_key(tmp_path, entry, message):
    cfg = yaml.safe_load(SMOKE.read_text())
    entry = dict(entry)
    name = entry.pop("name", "e")
    entry["path"] = {
        "FILE": _engine_file(tmp_path / "f.jsonl"),
        "KERNEL": _engine_file(tmp_path / "k.jsonl", "bf16", "flashinfer"),
    }.get(entry["path"], entry["path"])
    cfg["decode"]["external"] = {name: entry}
    res = snakemake("-n", cwd=workdir_with(tmp_path, cfg))
    assert res.returncode != 0 and message in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]


def test_lint_is_clean():
    res = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "Congratulations" in res.stdout + res.stderr, res.stdout[-3000:]


# The smoke study (tests/smoke/config.yaml), run once for the module; each test below checks one
# part of what it wrote, so one failure does not hide the others.


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke study's work directory after `snakemake --cores 2`, from scratch."""
    work = workdir_with(tmp_path_factory.mktemp("smoke"), yaml.safe_load(SMOKE.read_text()))
    res = snakemake("--cores", "2", cwd=work, timeout=1800)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return work


def _table(work, name):
    path = work / "results" / "tables" / name
    return pd.read_parquet(path) if name.endswith(".parquet") else pd.read_csv(path)


def _orthrus(work):
    overall = _table(work, "match_overall.csv")
    return overall[overall.decoder == "orthrus"]


@pytest.mark.slow
def test_smoke_orthrus_cells_follow_decode_grids(smoke):
    """smoke-ce over 2 precisions x 2 attentions, smoke-kl over the narrower grid of decode.grids (sdpa only)."""
    overall = _table(smoke, "match_overall.csv")
    assert {"model", "precision", "attention", "n", "match_rate", "ci_low", "ci_high"} <= set(overall.columns)
    orth = _orthrus(smoke)
    cells = lambda m: sorted(map(tuple, orth.loc[orth.model == m, ["precision", "attention"]].values.tolist()))
    assert cells("smoke-ce") == [(p, a) for p in ("bf16", "fp32") for a in ("eager", "sdpa")]
    assert cells("smoke-kl") == [("bf16", "sdpa"), ("fp32", "sdpa")] and len(orth) == 6
    assert sorted(p.name for p in (smoke / "results/decode/smoke-kl").glob("*.parquet")) == [
        f"{d}-{p}-sdpa.parquet" for d in ("ar", "orthrus", "orthrus-lossy") for p in ("bf16", "fp32")
    ]
    fx = pd.read_parquet(smoke / "results/forensics.parquet")
    assert set(fx.loc[fx.model == "smoke-kl", "attention"]) <= {"sdpa"}


@pytest.mark.slow
def test_smoke_summary_shows_a_dash_where_a_model_has_no_cell(smoke):
    from orthrus.report import summary

    block = summary.render(smoke / "results" / "tables")  # docs/RESULTS.md's block: '-' where smoke-kl has no cell
    assert re.search(r"^\| fp32 \| \S+ / - \| \S+ / \S+ \|$", block, re.M), block
    assert block.startswith("Each claim of the study")  # the claims first


@pytest.mark.slow
def test_smoke_fp32_is_exact_for_orthrus_and_transformers_decoders(smoke):
    overall = _table(smoke, "match_overall.csv")
    orth = _orthrus(smoke)
    assert (orth[orth.precision == "fp32"].match_rate == 1.0).all()
    hf = overall[overall.decoder.isin(["assisted", "prompt-lookup"])]
    assert (hf[hf.precision == "fp32"].match_rate == 1.0).all()
    # assisted over the whole grid, prompt-lookup over the narrower one of decode.grids (sdpa only)
    assert sorted(map(tuple, hf[["decoder", "attention"]].values.tolist())) == sorted(
        [("assisted", a) for a in ("eager", "sdpa")] * 2 + [("prompt-lookup", "sdpa")] * 2
    )


@pytest.mark.slow
def test_smoke_decoders_table_has_every_decoder(smoke):
    decoders = _table(smoke, "decoders.csv")
    assert set(decoders.decoder) == {
        "orthrus",
        "assisted",
        "prompt-lookup",
        "oracle",
        "ar-batched",
        "orthrus-lossy",
        "external",
    }
    assert (smoke / "results" / "figures" / "decoders.png").stat().st_size > 0


@pytest.mark.slow
def test_smoke_engine_files_join_every_table(smoke):
    """The engines' files (decode.external, written by the stand-in engine from the exported prompts):
    the plain run is the ar-ref reference exactly; the engine pair's prompt-lookup run, compared with
    that plain run, matches as often as the in-process prompt-lookup in the same cell, and its
    divergences have verdicts."""
    overall = _table(smoke, "match_overall.csv")
    ext = overall[overall.decoder == "external"].set_index("model")
    assert set(ext.index) == {"engine-ar", "engine-pld"} and ext.match_rate["engine-ar"] == 1.0
    pld = overall[(overall.decoder == "prompt-lookup") & (overall.precision == "bf16") & (overall.attention == "sdpa")]
    assert ext.match_rate["engine-pld"] == pld.match_rate.iloc[0] and (ext.n_errors_excluded == 0).all()
    traj = _table(smoke, "trajectories.parquet")
    assert set(traj.loc[traj.model == "engine-pld", "reference"]) == {"engine-ar"}
    assert set(traj.loc[traj.model == "engine-ar", "reference"]) == {"teacher"}
    tpf = _table(smoke, "tpf_by_domain.csv")
    assert tpf.loc[(tpf.decoder == "external") & (tpf.domain == "all"), "tpf_verify"].notna().all()
    fx = pd.read_parquet(smoke / "results/forensics.parquet")
    # engine-pld's divergences from engine-ar, each explained (none where it matched on every prompt)
    ext_fx = fx[fx.decoder == "external"]
    assert set(ext_fx["model"]) == ({"engine-pld"} if ext.match_rate["engine-pld"] < 1 else set())
    assert set(ext_fx["verdict"]) <= {"tie", "rounding"} and ext_fx["verdict"].notna().all()
    assert {"engine-ar", "engine-pld"} <= set(_table(smoke, "pairwise_match.csv").a_model)


@pytest.mark.slow
def test_smoke_sampled_engine_pair_gets_the_two_sample_test(smoke):
    """sampling.engines: the stand-in samples the sampled export plain and with prompt lookup (each its
    own seed); the pair gets one test per exported prompt, and both sample the teacher's distribution."""
    exported = [json.loads(line) for line in (smoke / "results/export/sampled.jsonl").read_text().splitlines()]
    assert sorted(e["domain"] for e in exported) == ["code", "math"] and {e["n_samples"] for e in exported} == {40}
    table = _table(smoke, "sampling_engines.csv")
    assert list(table["engine"]) == ["sampled-pld"] * 2 and set(table["reference"]) == {"sampled-ar"}
    assert set(table["prompt_id"]) == {e["prompt_id"] for e in exported}
    assert (table["engine_seed"] != table["reference_seed"]).all() and not table["rejected"].any()
    assert (smoke / "results/tables/sampling_engines.md").is_file()


@pytest.mark.slow
def test_smoke_audit_catches_the_planted_bug_and_explains_the_rest(smoke):
    """The planted bug is `not lossless` in both precisions; every other divergence is numerics."""
    decoders = _table(smoke, "decoders.csv")
    lossy = decoders[decoders.decoder == "orthrus-lossy"]
    for precision in ("bf16", "fp32"):
        assert (lossy[lossy.precision == precision].audit == "not lossless").any(), lossy.to_string()
    honest = decoders[decoders.decoder != "orthrus-lossy"]
    assert (honest.n_structural == 0).all() and (honest.n_no_verdict == 0).all(), honest.to_string()
    assert honest.oracle_match_rate.notna().all() and honest.batch_match_rate.notna().all()
    fx = pd.read_parquet(smoke / "results/forensics.parquet")
    assert set(fx.loc[fx.decoder != "orthrus-lossy", "verdict"]) <= {"tie", "rounding"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["match_by_domain", "match_vs_ppl", "survival"])
def test_smoke_figures_are_drawn(smoke, name):
    assert (smoke / "results" / "figures" / f"{name}.png").stat().st_size > 0


@pytest.mark.slow
def test_smoke_claims(smoke):
    """The claims table; benchmarks off: no benchmark claim."""
    from orthrus import contracts

    claims = _table(smoke, "claims.csv")
    assert list(claims.columns) == contracts.CLAIMS_COLUMNS and (smoke / "results/tables/claims.md").exists()
    assert claims.loc[claims.claim == "fp32-exact", "verdict"].tolist() == ["holds"]
    decoders = _table(smoke, "decoders.csv")
    planted = claims[claims.claim == "planted-bug-caught"]
    assert len(planted) == (decoders.decoder == "orthrus-lossy").sum()
    assert "fails" not in set(planted.verdict) and "holds" in set(planted.verdict)
    assert "fails" not in set(claims.loc[claims.claim == "divergences-are-numerics", "verdict"])
    assert "benchmarks-equivalent" not in set(claims.claim)


@pytest.mark.slow
def test_smoke_price_of_exactness(smoke):
    """Every setting on the same prompts, the guards on the base cell."""
    from orthrus import contracts

    cost = _table(smoke, "exactness_cost.csv")
    assert list(cost.columns) == contracts.FRONTIER_TABLES["exactness_cost.csv"] and set(cost.model) == {"smoke-ce"}
    assert len(cost) == 3 * 2 + 2 and cost.n.nunique() == 1 and cost.cheapest_exact.sum() <= 1
    base = cost[(cost.precision == "bf16") & (cost.attention == "sdpa") & (cost.verify_guard == 0)]
    assert base.time_vs_base.tolist() == [1.0] and (smoke / "results/figures/exactness_cost.png").stat().st_size > 0
    guarded = cost[cost.verify_guard > 0]
    assert len(guarded) == 2 and (guarded.match_rate >= base.match_rate.iloc[0]).all(), cost.to_string()


@pytest.mark.slow
def test_smoke_decoding_rows_record_their_numerical_environment(smoke):
    decoded = pd.read_parquet(smoke / "results/decode/smoke-ce/orthrus-bf16-sdpa.parquet")
    assert '"dtype": "bf16"' in decoded.env.iloc[0] and '"attention": "sdpa"' in decoded.env.iloc[0]


@pytest.mark.slow
def test_smoke_rerun_has_nothing_to_do_and_a_lost_shard_is_redone_alone(smoke):
    """Last of the smoke tests: it removes a corpus shard."""
    again = snakemake("-n", cwd=smoke)
    assert "Nothing to be done" in again.stdout + again.stderr
    (smoke / "results/corpus/shard_1-of-2.parquet").unlink()
    plan = snakemake("-n", "results/corpus/shard_1-of-2.parquet", "results/corpus/shard_2-of-2.parquet", cwd=smoke)
    assert re.search(r"^corpus_shard\s+1$", plan.stdout, re.M), plan.stdout[-2000:]
    assert "output: results/corpus/shard_1-of-2.parquet" in plan.stdout


def test_every_shell_placeholder_is_quoted():
    """Every `{...}` of every rule's shell command goes through `:q` (optional flags are argument
    lists, quoted element by element), except the launcher, which is a command, not a value."""
    unquoted = []
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        lines = smk.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != "shell:":
                continue
            for cont in lines[i + 1 :]:
                if not cont.strip().startswith('"'):
                    break
                unquoted += [
                    f"{smk.name}: {{{p}}}"
                    for p in re.findall(r"\{([^{}]+)\}", cont)
                    if not p.endswith(":q") and p != "params.launch"
                ]
    assert not unquoted, unquoted


@pytest.mark.slow
def test_config_paths_reach_the_shell_quoted(tmp_path):
    """A local hf teacher at a path with a space, both quotes and `$(...)`: the corpus job runs on
    it and nothing else runs (every config value reaches the shell through Snakemake's `:q`)."""
    nasty = tmp_path / "te a'ch\"er$(touch PWNED)"
    tiny = {
        "steps": 1,
        "warmup_steps": 0,  # below steps, as the section asks
        "eval_per_domain": 0,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_layers": 1,
        "head_dim": 8,
        "vocab_size": 300,
    }
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "orthrus.cli",
            "train-teacher",
            "--out",
            str(nasty),
            *[a for k, v in tiny.items() for a in ("--set", f"{k}={v}")],
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["teacher"] = {"name": "teacher", "source": "hf", "path": str(nasty), "draft": cfg["teacher"]["draft"]}
    cfg["prompts"].update(eval_per_domain=1, distill_n=4)
    cfg["corpus"].update(shards=1, max_new_tokens=4)
    work = tmp_path / "work"
    work.mkdir()
    res = snakemake("--cores", "1", "results/corpus/shard_1-of-1.parquet", cwd=workdir_with(work, cfg))
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    shard = pd.read_parquet(work / "results/corpus/shard_1-of-1.parquet")
    assert len(shard) == 4 and shard.teacher.iloc[0] == str(nasty)
    assert not list(tmp_path.rglob("PWNED")) and not list(ROOT.glob("PWNED"))
    # the teacher's files are inputs: new weights at the same path make the corpus stale
    from safetensors.torch import load_file, save_file

    weights = load_file(nasty / "model.safetensors")
    save_file({k: v + 1 for k, v in weights.items()}, nasty / "model.safetensors")
    plan = snakemake("-n", "results/corpus/shard_1-of-1.parquet", cwd=work)
    assert re.search(r"^corpus_shard\s+1$", plan.stdout, re.M), plan.stdout[-2000:]
    # the same directory as an hf draft of the assisted decoder reaches its command quoted too
    cfg["teacher"]["draft"] = {"source": "hf", "path": str(nasty)}
    shown = snakemake("-n", "-p", "results/decode/teacher/assisted-fp32-eager.parquet", cwd=workdir_with(work, cfg))
    assert shown.returncode == 0, (shown.stdout + shown.stderr)[-2000:]
    assert f"--draft-path {shlex.quote(str(nasty))} " in shown.stdout


@pytest.mark.slow
def test_table7_runs_gsm8k_and_ifeval_under_the_safe_default(tmp_path):
    """Without the code-execution opt-in the paper's HumanEval is left out, said in one line,
    and GSM8K and IFEval still run; with the opt-in all three; a task list of only code tasks is
    refused naming the key."""
    paper = yaml.safe_load((ROOT / "configs/paper.yaml").read_text())
    assert paper["benchmarks"]["allow_code_eval"] is False
    for d in ("safe", "opted", "only"):
        (tmp_path / d).mkdir()
    safe = snakemake("-n", "-p", cwd=workdir_with(tmp_path / "safe", paper))
    assert safe.returncode == 0, safe.stderr[-2000:]
    assert "benchmarks: humaneval left out: it runs model-written code" in safe.stderr
    runs = [c for c in safe.stdout.splitlines() if "orthrus lm-eval run" in c]
    assert runs and all("--tasks gsm8k,ifeval " in c and "--allow-code-eval" not in c for c in runs)
    opted = snakemake(
        "-n",
        "-p",
        cwd=workdir_with(tmp_path / "opted", {**paper, "benchmarks": {**paper["benchmarks"], "allow_code_eval": True}}),
    )
    runs = [c for c in opted.stdout.splitlines() if "orthrus lm-eval run" in c]
    assert runs and all("--tasks gsm8k,humaneval,ifeval " in c and "--allow-code-eval" in c for c in runs)
    assert "left out" not in opted.stderr
    only = snakemake(
        "-n",
        cwd=workdir_with(tmp_path / "only", {**paper, "benchmarks": {**paper["benchmarks"], "tasks": ["humaneval"]}}),
    )
    assert only.returncode != 0 and "benchmarks.tasks: every task runs model-written code" in only.stdout + only.stderr


@pytest.mark.slow
def test_a_kernel_that_is_not_installed_fails_before_any_job(tmp_path):
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here: the missing-kernel refusal cannot be shown")
    cfg = default_config()
    cfg["analysis"]["ppl_attention"] = "flash_attention_2"
    cfg["decode"]["attentions"] = ["eager", "flash_attention_2"]
    res = snakemake("-n", cwd=workdir_with(tmp_path, cfg))
    out = res.stdout + res.stderr
    assert res.returncode != 0 and not (tmp_path / "results").exists()
    assert "decode.attentions: flash_attention_2 needs the flash_attn package" in out
    assert "analysis.ppl_attention: flash_attention_2 needs the flash_attn package" in out


@pytest.mark.slow
def test_the_cluster_profile_keeps_going_and_gives_each_rule_its_threads(tmp_path):
    """`--profile profiles/slurm` with the paper config: every job keeps the config's 8 threads
    (the workflow profile, which Snakemake applies on top, caps nothing), and the effective
    settings keep going past a failed job."""
    shown = snakemake(
        "-n",
        "-p",
        "--profile",
        str(ROOT / "profiles/slurm"),
        "--configfile",
        str(ROOT / "configs/paper.yaml"),
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    threads = re.findall(r"--threads (\d+)", shown.stdout)
    assert threads and set(threads) == {"8"}
    assert "torchrun --standalone --nproc_per_node 8" in shown.stdout
    local = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())
    cluster = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    effective = {**cluster, **local}  # the workflow profile wins where both set a key
    assert effective["keep-going"] is True and effective["cores"] >= 8
    assert "cores" not in local and "keep-going" not in local
