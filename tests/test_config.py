"""Configuration checks: the schema describes every key, and a malformed config stops `snakemake -n`
before any job, naming the key, however the workflow is started (orthrus/plan/study_config.py)."""

import contextlib
import copy
import importlib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from orthrus.errors import ConfigError
from orthrus.plan.study_config import study_config, typed_overrides
from orthrus.plan.yaml_data import file_hazards, yaml_hazards

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
SMOKE = yaml.safe_load((ROOT / "tests/smoke/config.yaml").read_text())
SMOKE_TEXT = (ROOT / "tests/smoke/config.yaml").read_text()


def _set(path, value):
    def mutate(cfg):
        *parents, last = path.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return mutate


def _drop(path):
    def mutate(cfg):
        *parents, last = path.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        del node[last]

    return mutate


def _both(*mutations):
    def mutate(cfg):
        for m in mutations:
            m(cfg)

    return mutate


HF = {"name": "teacher", "source": "hf"}


# (case, mutation of the smoke config or raw YAML text, the key path the error must name)
def _named(section, name, value=None):
    """Add an entry called `name` under the dotted `section` (a copy of smoke-ce by default)."""

    def mutate(cfg):
        node = cfg
        for p in section.split("."):
            node = node.setdefault(p, {})
        node[name] = copy.deepcopy(cfg["models"]["smoke-ce"]) if value is None else value

    return mutate


BAD = [
    ("model typo", _set("models.smoke-ce.lerning_rate", 0.1), "models.smoke-ce.lerning_rate"),
    ("model lr word", _set("models.smoke-ce.lr", "fast"), "models.smoke-ce.lr"),
    ("model K word", _set("models.smoke-ce.block_size", "four"), "models.smoke-ce.block_size"),
    ("model K zero", _set("models.smoke-ce.block_size", 0), "models.smoke-ce.block_size"),
    ("model objective", _set("models.smoke-ce.objective", "mse"), "models.smoke-ce.objective"),
    ("model max_steps", _set("models.smoke-ce.max_steps", -5), "models.smoke-ce.max_steps"),
    ("model betas", _set("models.smoke-ce.betas", [0.9]), "models.smoke-ce.betas"),
    ("model attention", _set("models.smoke-ce.attention", "flash"), "models.smoke-ce.attention"),
    ("model kl_weight", _set("models.smoke-ce.kl_weight", 2), "models.smoke-ce.kl_weight"),
    ("model not a mapping", _set("models.smoke-ce", [1, 2]), "models.smoke-ce"),
    ("model bad name", _set("models.bad name!", {}), "models"),
    # names become paths and wildcards: `..` would make a failed job's cleanup remove results/
    ("model named ..", _named("models", ".."), "models"),
    ("model named .", _named("models", "."), "models"),
    ("model named like an option", _named("models", "--help"), "models"),
    ("model name with a trailing newline", _named("models", "kl\n"), "models"),
    ("model name a number", _named("models", 1), "models"),
    ("model name null", _named("models", None), "models"),
    ("external model named ..", _named("external_models", "..", "hub/id"), "external_models"),
    ("grid named ..", _named("decode.grids", "..", {"attentions": ["sdpa"]}), "decode.grids"),
    ("teacher named ..", _set("teacher.name", ".."), "teacher.name"),
    # NaN passes every range check of the schema; infinities are no sizes either
    ("near_tie nan", _set("analysis.near_tie", float("nan")), "analysis.near_tie"),
    ("near_tie inf", _set("analysis.near_tie", float("inf")), "analysis.near_tie"),
    ("max_error_share nan", _set("decode.max_error_share", float("nan")), "decode.max_error_share"),
    ("model lr nan", _set("models.smoke-ce.lr", float("nan")), "models.smoke-ce.lr"),
    # sizes a laptop and a cluster both refuse (docs/CONFIG.md states each maximum)
    ("eval prompts a billion", _set("prompts.eval_per_domain", 10**9), "prompts.eval_per_domain"),
    ("corpus shards 1e5", _set("corpus.shards", 100000), "corpus.shards"),
    ("decode tokens a million", _set("decode.max_new_tokens", 10**6), "decode.max_new_tokens"),
    ("teacher 1000 layers", _set("teacher.tiny.num_layers", 1000), "teacher.tiny.num_layers"),
    ("min_chars above max_chars", _set("prompts.min_chars", 5000), "prompts.min_chars"),
    (
        "every domain weighs 0",
        _set(
            "teacher.tiny.domain_weights",
            dict.fromkeys(
                [
                    "code",
                    "code-ru",
                    "creative-en",
                    "gec-en",
                    "gec-ru",
                    "math",
                    "math-ru",
                    "poetry-en",
                    "poetry-ru",
                    "qa",
                    "qa-ru",
                    "wmt-ru-en",
                ],
                0,
            ),
        ),
        "teacher.tiny.domain_weights",
    ),
    ("model offset weights", _set("models.smoke-ce.offset_weights", [1, 1]), "models.smoke-ce.offset_weights"),
    ("model named like teacher", _set("models.teacher", {}), "models.teacher"),
    ("external named like model", _set("external_models.smoke-ce", "org/model"), "external_models.smoke-ce"),
    ("external named like teacher", _set("external_models.teacher", "org/model"), "external_models.teacher"),
    ("external missing dir", _set("external_models.ext", "/no/such/orthrus"), "external_models.ext"),
    ("external empty", _set("external_models.ext", ""), "external_models.ext"),
    ("tiny steps", _set("teacher.tiny.steps", -1), "teacher.tiny.steps"),
    ("tiny hidden", _set("teacher.tiny.hidden_size", 0), "teacher.tiny.hidden_size"),
    ("tiny typo", _set("teacher.tiny.stpes", 10), "teacher.tiny.stpes"),
    ("tiny heads", _set("teacher.tiny.num_heads", 3), "teacher.tiny.num_heads"),
    ("tiny domain weights", _set("teacher.tiny.domain_weights", {"klingon": 1}), "teacher.tiny.domain_weights"),
    ("teacher source", _set("teacher.source", 42), "teacher.source"),
    ("teacher name", _set("teacher.name", "a b"), "teacher.name"),
    ("hf teacher without path", _set("teacher", dict(HF)), "teacher.path"),
    ("hf teacher missing dir", _set("teacher", {**HF, "path": "./no/such/teacher"}), "teacher.path"),
    ("hf teacher not a model dir", _set("teacher", {**HF, "path": "/"}), "teacher.path"),
    ("unknown top-level key", _set("unknown_key", 1), "unknown_key"),
    ("seed word", _set("seed", "zero"), "seed"),
    ("threads zero", _set("threads", 0), "threads"),
    ("missing decode", _drop("decode"), "decode"),
    ("decode device", _set("decode.device", "tpu9"), "decode.device"),
    ("decode precision", _set("decode.precisions", ["fp8"]), "decode.precisions[0]"),
    ("decode duplicate precision", _set("decode.precisions", ["fp32", "fp32"]), "decode.precisions"),
    ("decode attention", _set("decode.attentions", ["flash"]), "decode.attentions[0]"),
    ("decode tokens float", _set("decode.max_new_tokens", 4.5), "decode.max_new_tokens"),
    ("decode error share", _set("decode.max_error_share", 1.5), "decode.max_error_share"),
    ("corpus shards", _set("corpus.shards", 0), "corpus.shards"),
    ("corpus precision", _set("corpus.precision", "int8"), "corpus.precision"),
    ("prompts domain", _set("prompts.domains", ["klingon"]), "prompts.domains[0]"),
    ("prompts hf without eval", _set("prompts.source", "hf"), "prompts.eval"),
    (
        "prompts spec without path",
        _both(_set("prompts.source", "hf"), _set("prompts.eval", {"qa": {"n": 3}})),
        "prompts.eval.qa.path",
    ),
    ("analysis near tie", _set("analysis.near_tie", -1), "analysis.near_tie"),
    ("analysis precision", _set("analysis.ppl_precision", "fp64"), "analysis.ppl_precision"),
    ("resources gpus", _set("resources.decode.gpus", -1), "resources.decode.gpus"),
    ("resources typo", _set("resources.decode.memory", 10), "resources.decode.memory"),
    ("machine unknown kind", _set("machine.kinds", ["native", "sse4"]), "machine.kinds[1]"),
    ("machine threads not the study's first", _set("machine.threads", [3, 1]), "machine.threads"),
    (
        "benchmarks no tasks",
        _set("benchmarks", {"enabled": True, "tiny_tasks": False, "tasks": []}),
        "benchmarks.tasks",
    ),
    ("benchmarks precisions", _set("benchmarks", {"enabled": True, "precisions": []}), "benchmarks.precisions"),
    ("model schedule", _set("models.smoke-ce.schedule", "linear"), "models.smoke-ce.schedule"),
    ("model mask token empty", _set("models.smoke-ce.mask_token", ""), "models.smoke-ce.mask_token"),
    ("prompts eval file missing", _set("prompts.eval_file", "./no/such/prompts.json"), "prompts.eval_file"),
    ("prompts eval file scheme", _set("prompts.eval_file", "ftp://example.org/p.json"), "prompts.eval_file"),
    ("prompts sha256 not hex", _set("prompts.eval_file_sha256", "abc"), "prompts.eval_file_sha256"),
    ("prompts sha256 without file", _set("prompts.eval_file_sha256", "0" * 64), "prompts.eval_file_sha256"),
    ("prompts duplicates policy", _set("prompts.eval_duplicates", "last"), "prompts.eval_duplicates"),
    (
        "hf prompts without distill for generate",
        _both(_set("prompts.source", "hf"), _set("prompts.eval_file", "https://example.org/p.json")),
        "prompts.distill",
    ),
    ("corpus source", _set("corpus.source", "scrape"), "corpus.source"),
    ("corpus hf without dataset", _set("corpus.source", "hf"), "corpus.dataset"),
    ("corpus message", _set("corpus.message", "user"), "corpus.message"),
    ("decode message", _set("decode.message", "System:x"), "decode.message"),
    ("decode eos policy", _set("decode.eos", "tokenizer"), "decode.eos"),
    ("decode last block", _set("decode.last_block", "trim"), "decode.last_block"),
    ("decode deterministic word", _set("decode.deterministic", "yes"), "decode.deterministic"),
    ("tpf tokens zero", _set("tpf.max_new_tokens", 0), "tpf.max_new_tokens"),
    ("tpf typo", _set("tpf.enable", True), "tpf.enable"),
    ("analysis ppl attention", _set("analysis.ppl_attention", "flash"), "analysis.ppl_attention"),
    ("benchmarks ar baseline", _set("benchmarks.ar_baseline", "vllm"), "benchmarks.ar_baseline"),
    ("benchmarks max gen zero", _set("benchmarks.max_gen_toks", 0), "benchmarks.max_gen_toks"),
    ("benchmark docs of an unknown task", _set("benchmarks.n_docs", {"gsm8k": 10}), "benchmarks.n_docs"),
    ("benchmark docs zero for a task", _set("benchmarks.n_docs", {"tiny_qa": 0}), "benchmarks.n_docs.tiny_qa"),
    (
        "benchmark docs missing a task that runs",
        _both(
            _set("benchmarks.enabled", True),
            _set("benchmarks.tiny_tasks", ["tiny_arith", "tiny_qa"]),
            _set("benchmarks.n_docs", {"tiny_arith": 30}),
        ),
        "benchmarks.n_docs",
    ),
    (
        "benchmark docs missing one of all five tasks",
        _both(
            _set("benchmarks.enabled", True),
            _set("benchmarks.tiny_tasks", True),
            _set("benchmarks.n_docs", {"tiny_arith": 3, "tiny_code": 3, "tiny_gec": 3, "tiny_qa": 3}),
        ),
        "benchmarks.n_docs",
    ),
    (
        "benchmark docs for a task that does not run",
        _both(
            _set("benchmarks.enabled", True),
            _set("benchmarks.tiny_tasks", ["tiny_arith"]),
            _set("benchmarks.n_docs", {"tiny_arith": 30, "tiny_qa": 20}),
        ),
        "benchmarks.n_docs",
    ),
    # transformers' speculative decoders and the assisted decoder's draft (teacher.draft)
    ("decoders unknown", _set("decode.decoders", ["medusa"]), "decode.decoders[0]"),
    ("decoders duplicate", _set("decode.decoders", ["assisted", "assisted"]), "decode.decoders"),
    ("decoders not a list", _set("decode.decoders", "assisted"), "decode.decoders"),
    ("prompt lookup tokens zero", _set("decode.prompt_lookup_tokens", 0), "decode.prompt_lookup_tokens"),
    ("grid of an unknown decoder", _set("decode.grids", {"medusa": {"attentions": ["sdpa"]}}), "decode.grids.medusa"),
    # decode.grids may also narrow an Orthrus model (its Orthrus loop and AR view)
    ("grid of an unknown model", _set("decode.grids", {"smoke-k9": {"attentions": ["sdpa"]}}), "decode.grids.smoke-k9"),
    (
        "grid of a model outside the decode grid",
        _set("decode.grids", {"smoke-ce": {"attentions": ["flash_attention_2"]}}),
        "decode.grids.smoke-ce.attentions",
    ),
    (
        "grid of a model and a decoder",
        _both(_set("models.assisted", {}), _set("decode.grids.assisted", {})),
        "decode.grids.assisted",
    ),
    ("grid bad name", _set("decode.grids", {"smoke ce": {}}), "decode.grids"),
    ("grid of a decoder not run", _set("decode.decoders", ["assisted"]), "decode.grids.prompt-lookup"),
    (
        "grid outside the decode grid",
        _set("decode.grids", {"assisted": {"precisions": ["fp16"]}}),
        "decode.grids.assisted.precisions",
    ),
    ("grid key typo", _set("decode.grids", {"assisted": {"attention": ["sdpa"]}}), "decode.grids.assisted.attention"),
    (
        "grid prompts of an unknown precision",
        _set("decode.grids", {"assisted": {"prompts_per_domain": {"fp64": 2}}}),
        "decode.grids.assisted.prompts_per_domain",
    ),
    (
        "grid prompts zero for a precision",
        _set("decode.grids", {"assisted": {"prompts_per_domain": {"fp32": 0}}}),
        "decode.grids.assisted.prompts_per_domain.fp32",
    ),
    (
        "grid prompts for a precision the cells do not run",
        _set("decode.grids", {"assisted": {"precisions": ["fp32"], "prompts_per_domain": {"bf16": 2}}}),
        "decode.grids.assisted.prompts_per_domain",
    ),
    ("assisted without draft", _drop("teacher.draft"), "teacher.draft"),
    (
        "hub draft beside tiny teacher",
        _set("teacher.draft", {"source": "hf", "path": "Qwen/Qwen3-0.6B"}),
        "teacher.draft.path",
    ),
    ("hf draft without path", _set("teacher.draft", {"source": "hf"}), "teacher.draft.path"),
    (
        "hf draft missing dir",
        _set("teacher", {**HF, "path": "Qwen/Qwen3-1.7B", "draft": {"source": "hf", "path": "./no/such/draft"}}),
        "teacher.draft.path",
    ),
    ("draft source", _set("teacher.draft.source", "onnx"), "teacher.draft.source"),
    ("draft unknown key", _set("teacher.draft.name", "d"), "teacher.draft.name"),
    ("draft threads zero", _set("teacher.draft.threads", 0), "teacher.draft.threads"),
    ("draft tiny typo", _set("teacher.draft.tiny.stpes", 10), "teacher.draft.tiny.stpes"),
    ("draft tiny vocab", _set("teacher.draft.tiny.vocab_size", 300), "teacher.draft.tiny.vocab_size"),
    ("draft tiny heads", _set("teacher.draft.tiny.num_heads", 3), "teacher.draft.tiny.num_heads"),
    # issue 35: settings that would train or measure nothing, each refused naming its key
    ("model block longer than max_len", _set("models.smoke-ce.block_size", 512), "models.smoke-ce.block_size"),
    (
        "model block as long as max_len",
        _both(_set("models.smoke-ce.block_size", 16), _set("models.smoke-ce.max_len", 16)),
        "models.smoke-ce.block_size",
    ),
    (
        "model offset weights all zero",
        _set("models.smoke-ce.offset_weights", [0, 0, 0]),
        "models.smoke-ce.offset_weights",
    ),
    ("model lr 1e6", _set("models.smoke-ce.lr", 1.0e6), "models.smoke-ce.lr"),
    ("tiny teacher lr 1e6", _set("teacher.tiny.lr", 1.0e6), "teacher.tiny.lr"),
    ("model warmup beyond max_steps", _set("models.smoke-ce.warmup_steps", 6), "models.smoke-ce.warmup_steps"),
    (
        "model warmup beyond the epochs' steps",
        _both(_set("models.smoke-ce.max_steps", None), _set("models.smoke-ce.warmup_steps", 5)),
        "models.smoke-ce.warmup_steps",
    ),
    (
        "model global batch above the corpus",
        _both(_set("models.smoke-ce.max_steps", None), _set("models.smoke-ce.batch_size", 64)),
        "models.smoke-ce.batch_size",
    ),
    ("tiny teacher warmup beyond steps", _set("teacher.tiny.warmup_steps", 300), "teacher.tiny.warmup_steps"),
    ("draft warmup beyond steps", _set("teacher.draft.tiny.warmup_steps", 10), "teacher.draft.tiny.warmup_steps"),
    (
        "model mask token outside the vocabulary",
        _set("models.smoke-ce.mask_token_id", 10**6),
        "models.smoke-ce.mask_token_id",
    ),
    ("corpus shards above the distill prompts", _set("corpus.shards", 33), "corpus.shards"),
    ("near_tie a percent", _set("analysis.near_tie", 12.5), "analysis.near_tie"),
    ("seed beyond torch", _set("seed", 2**64), "seed"),
    ("seed negative", _set("seed", -1), "seed"),
    ("model seed beyond torch", _set("models.smoke-ce.seed", 2**64), "models.smoke-ce.seed"),
    (
        "model seed plus global beyond torch",
        _both(_set("seed", 2**63), _set("models.smoke-ce.seed", 2**63)),
        "models.smoke-ce.seed",
    ),
    ("benchmark task ..", _set("benchmarks.tasks", [".."]), "benchmarks.tasks[0]"),
    ("benchmark task with a slash", _set("benchmarks.tasks", ["a/b"]), "benchmarks.tasks[0]"),
    ("benchmark task like an option", _set("benchmarks.tasks", ["--help"]), "benchmarks.tasks[0]"),
    ("benchmark task with a newline", _set("benchmarks.tasks", ["gsm8k\n"]), "benchmarks.tasks[0]"),
    (
        "prompts eval domain ..",
        _both(
            _set("prompts.source", "hf"),
            _set("prompts.eval", {"..": {"path": "x"}}),
            _set("prompts.distill", [{"path": "y"}]),
        ),
        "prompts.eval",
    ),
    ("prompts eval file /dev/zero URL", _set("prompts.eval_file", "file:///dev/zero"), "prompts.eval_file"),
    ("prompts eval file /dev/zero", _set("prompts.eval_file", "/dev/zero"), "prompts.eval_file"),
    ("prompts eval file URL of a directory", _set("prompts.eval_file", "file:///tmp"), "prompts.eval_file"),
    ("prompts eval file URL missing", _set("prompts.eval_file", "file:///no/such/prompts.json"), "prompts.eval_file"),
    ("prompts eval file URL of another host", _set("prompts.eval_file", "file://server/p.json"), "prompts.eval_file"),
    ("duplicate nested key", SMOKE_TEXT.replace("steps: 300,", "steps: 300, steps: 3,"), "teacher.tiny.steps"),
    ("duplicate top-level key", SMOKE_TEXT + "seed: 1\n", "seed"),
    ("frontier precision unknown", _set("frontier.precisions", ["fp8"]), "frontier.precisions[0]"),
    ("frontier typo", _set("frontier.promts_per_domain", 2), "frontier.promts_per_domain"),
    ("revisions pin a number", _set("revisions", {"Qwen/Qwen3-1.7B": 5}), "revisions.Qwen/Qwen3-1.7B"),
    ("revisions pin of an id not loaded", _set("revisions", {"org/unused": "main"}), "revisions.org/unused"),
    ("engines cache of no size", _set("engines.kv_cache_gib", 0), "engines.kv_cache_gib"),
    ("engines typo", _set("engines.vllm_pyhton", "x"), "engines.vllm_pyhton"),
    (
        "sampling greedy temperature",
        _set("sampling", {"enabled": True, "temperatures": [0]}),
        "sampling.temperatures[0]",
    ),
    ("sampling of no such model", _set("sampling", {"enabled": True, "model": "nope"}), "sampling.model"),
    ("sampling too few samples", _set("sampling.two_sample", {"n_samples": 2}), "sampling.two_sample.n_samples"),
]


def _config_text(case) -> str:
    if isinstance(case, str):
        return case
    cfg = copy.deepcopy(SMOKE)
    case(cfg)
    return yaml.safe_dump(cfg)


def _check(text: str, tmp_path) -> list[str]:
    # read as a run in tmp_path reads it: its working directory's config.yaml, a whole config (a file
    # named elsewhere would be an overlay on the repository's config.yaml, orthrus/plan/overlay.py)
    path = tmp_path / "config.yaml"
    path.write_text(text)
    try:
        with contextlib.chdir(tmp_path):
            study_config([path])
    except ConfigError as e:
        return e.problems
    return []


def test_schema_uses_only_known_keywords():
    """The generated schema speaks JSON Schema: every keyword one an editor or `validate()` knows (pydantic
    writes a bound it cannot place under its own name, `ge`, which the generator renames)."""
    known = {
        "anyOf",
        "const",
        "patternProperties",
        "$schema",
        "$defs",
        "$ref",
        "description",
        "type",
        "additionalProperties",
        "properties",
        "default",
        "pattern",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "required",
        "propertyNames",
        "multipleOf",
        "minLength",
        "maxLength",
        "maxProperties",
    }
    bad = []

    def walk(node, path, names=False):
        if not isinstance(node, dict):
            return
        if names:  # a `properties` / `$defs` mapping: every key is a name, every value a schema
            for k, v in node.items():
                walk(v, f"{path}.{k}")
            return
        bad.extend(f"{path}: {k}" for k in set(node) - known)
        for k, v in node.items():
            if k != "default":  # a value, not a schema (an object's default is a mapping)
                walk(v, f"{path}.{k}", names=k in ("properties", "$defs", "patternProperties"))

    walk(yaml.safe_load(SCHEMA.read_text()), "schema")
    assert not bad, bad


@pytest.mark.parametrize(
    "section, defaults", [("models", "orthrus.distill.settings"), ("tiny", "orthrus.world.teacher")]
)
def test_schema_describes_every_setting(section, defaults):
    """Every setting of a command the workflow runs has a schema entry (its default there: tests/test_plan.py)."""
    schema = yaml.safe_load(SCHEMA.read_text())
    props = schema["$defs"]["Settings" if section == "models" else "TinyTeacher"]["properties"]
    assert set(props) == set(importlib.import_module(defaults).DEFAULTS)


@pytest.mark.parametrize("path", ["config.yaml", "tests/smoke/config.yaml", "configs/paper.yaml"])
def test_shipped_configs_pass(path):
    cfg = study_config([ROOT / path])
    assert cfg["decode"]["max_error_share"] == 0 and "resources" in cfg  # defaults filled in
    assert all(
        set(s or {}) <= set(yaml.safe_load((ROOT / path).read_text())["models"][m] or {})
        for m, s in cfg["models"].items()
    )  # variant settings stay as written


def test_local_hf_teacher_directory_is_accepted(tmp_path):
    (tmp_path / "my teacher").mkdir()
    (tmp_path / "my teacher" / "config.json").write_text("{}")
    cfg = copy.deepcopy(SMOKE)
    cfg["teacher"] = {**HF, "path": str(tmp_path / "my teacher"), "draft": {"source": "tiny"}}
    study_config(values=cfg)
    cfg["teacher"]["path"] = "Qwen/Qwen3-1.7B"  # a hub id is checked by the job that downloads it
    study_config(values=cfg)


def test_paper_protocol_sources_are_accepted(tmp_path):
    """An eval file (local path or URL), a ready hub corpus and hub ids for the teacher and an
    external model (not local paths: the jobs that download them check them)."""
    # the domains the smoke's sampled engines test (sampling.two_sample.domains) are in the file
    (tmp_path / "prompts.json").write_text('{"qa": ["What is 2+2?"], "code": ["def f():"], "math": ["1+1"]}')
    cfg = copy.deepcopy(SMOKE)
    cfg["teacher"] = {**HF, "path": "Qwen/Qwen3-1.7B", "draft": {"source": "hf", "path": "Qwen/Qwen3-0.6B"}}
    cfg["prompts"] = {
        "source": "hf",
        "eval_file": str(tmp_path / "prompts.json"),
        "eval_duplicates": "first",
        "distill": [],
    }
    cfg["corpus"] |= {"source": "hf", "dataset": "ai-forever/ZaryaOrthrusDataset-1.7B", "message": "none"}
    cfg["external_models"] = {"ZaryaOrthrus-1.7B": "ai-forever/ZaryaOrthrus-1.7B"}
    study_config(values=cfg)
    cfg["prompts"]["eval_file"] = "https://example.org/speed_evaluation_dataset.json"
    study_config(values=cfg)


def test_grid_keys_name_a_decoder_or_an_orthrus_model(tmp_path):
    """decode.grids takes a speculative decoder that runs or a trained / external Orthrus model; an
    unknown key is named with what it may be."""
    (tmp_path / "orthrus").mkdir()
    (tmp_path / "orthrus" / "config.json").write_text("{}")
    cfg = copy.deepcopy(SMOKE)
    cfg["models"] = {"smoke-ce": cfg["models"]["smoke-ce"]}
    cfg["external_models"] = {"ext": str(tmp_path / "orthrus")}
    cfg["decode"]["grids"] = {
        "smoke-ce": {"attentions": ["sdpa"]},
        "ext": {"precisions": ["fp32"]},
        "assisted": {"attentions": ["eager"]},
    }
    study_config(values=cfg)
    cfg["decode"]["grids"]["kl-k8"] = {"attentions": ["sdpa"]}
    with pytest.raises(ConfigError) as err:
        study_config(values=cfg)
    assert err.value.problems == [
        "decode.grids.kl-k8: 'kl-k8' is neither a speculative decoder of decode.decoders or a control of "
        "decode.controls ['assisted', 'prompt-lookup', 'oracle', 'ar-batched', 'orthrus-lossy'] nor an Orthrus "
        "model of models / external_models ['smoke-ce', 'ext']"
    ]


def test_every_section_of_the_schema_has_a_malformed_case():
    """A section added to the schema without a case that breaks it fails here (cases named once each)."""
    covered = {re.split(r"[.\[]", key)[0] for _, _, key in BAD}
    missing = [section for section in yaml.safe_load(SCHEMA.read_text())["properties"] if section not in covered]
    assert not missing, f"no malformed-config case for {missing}"
    assert len({name for name, _, _ in BAD}) == len(BAD), "two cases share a name"


@pytest.mark.parametrize("name, case, key", BAD, ids=[b[0] for b in BAD])
def test_malformed_config_is_rejected_naming_the_key(tmp_path, name, case, key):
    problems = _check(_config_text(case), tmp_path)
    assert any(key + ":" in p for p in problems), problems


def test_a_pattern_error_says_its_rule_in_words():
    """A name, a hub id, a device that does not match its pattern is refused with the rule in words, not
    the regex (orthrus/config.py `matching`)."""
    cfg = copy.deepcopy(SMOKE)
    cfg["models"]["-bad"] = {}
    cfg["revisions"] = {"nohub": "main"}
    cfg["decode"]["device"] = "tpu"
    with pytest.raises(ConfigError) as e:
        study_config(values=cfg)
    lines = str(e.value).splitlines()
    assert (
        "  models: bad name '-bad': not a name of letters, digits, _ . and - that starts with neither . nor -" in lines
    )
    assert "  revisions: bad name 'nohub': not a hub id owner/name" in lines
    assert "  decode.device: 'tpu' is not cpu, cuda, cuda:N or mps" in lines
    assert "^" not in str(e.value), str(e.value)


@pytest.mark.slow
def test_malformed_configs_stop_a_real_dry_run(tmp_path):
    """The first case of each schema section through `snakemake -n` (the real parse), four processes
    at a time: what this adds to the check above is that the Snakefile stops on it before it reads
    the section, so one case per section covers it (every case took 4-5 minutes of CI)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = {re.split(r"[.\[]", key)[0]: i for i, (_, _, key) in reversed(list(enumerate(BAD)))}
    assert set(first) >= set(yaml.safe_load(SCHEMA.read_text())["properties"])

    def dry_run(i):
        name, case, key = BAD[i]
        work = tmp_path / str(i)
        work.mkdir()
        (work / "config.yaml").write_text(_config_text(case))
        res = subprocess.run(
            [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(work), "-n", "-q"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=work,
        )
        out = res.stdout + res.stderr
        ok = res.returncode != 0 and f"{key}:" in out and "ConfigError" in out and not (work / "results").exists()
        return None if ok else f"{name}: rc {res.returncode}, expected {key!r}:\n{out[-1500:]}"

    with ThreadPoolExecutor(4) as pool:
        failures = [f for f in pool.map(dry_run, first.values()) if f]
    assert not failures, "\n\n".join(failures)


def test_draft_rules_apply_only_to_the_assisted_decoder(tmp_path):
    """prompt-lookup needs no draft; a hub draft beside an hf teacher (its tokenizer checked when
    both load) and a tiny draft beside an hf teacher (trained with its tokenizer) are accepted."""
    cfg = copy.deepcopy(SMOKE)
    cfg["decode"]["decoders"] = ["prompt-lookup"]
    del cfg["teacher"]["draft"]
    assert study_config(values=cfg)["decode"]["prompt_lookup_tokens"] == 10  # default filled in
    cfg = copy.deepcopy(SMOKE)
    cfg["teacher"] = {**HF, "path": "Qwen/Qwen3-1.7B", "draft": {"source": "hf", "path": "Qwen/Qwen3-0.6B"}}
    assert study_config(values=cfg)["teacher"]["draft"]["threads"] == 1  # defaults filled in
    cfg["teacher"]["draft"] = {"source": "tiny", "tiny": {"steps": 5, "warmup_steps": 1}}
    cfg = study_config(values=cfg)
    assert cfg["teacher"]["draft"]["tiny"] == {"steps": 5, "warmup_steps": 1}  # the draft's settings stay as written


def test_integer_valued_floats_are_integers_everywhere(tmp_path):
    """`corpus.shards: 2.0` (YAML for 2) is taken as 2 by every later reader (a scatter count, an
    argparse int), not refused deep inside a rule; 2.5 is refused naming the key."""
    text = _config_text(
        lambda c: (
            c["corpus"].__setitem__("shards", 2.0),
            c["decode"].__setitem__("max_new_tokens", 16.0),
            c["models"]["smoke-ce"].__setitem__("block_size", 4.0),
        )
    )
    cfg = study_config(values=yaml.safe_load(text))
    assert cfg["corpus"]["shards"] == 2 and type(cfg["corpus"]["shards"]) is int
    assert type(cfg["decode"]["max_new_tokens"]) is int and type(cfg["models"]["smoke-ce"]["block_size"]) is int
    problems = _check(_config_text(_set("corpus.shards", 2.5)), tmp_path)
    assert any(p.startswith("corpus.shards:") for p in problems), problems


# --------------------------------------------------------------------------- config files are data


def _bomb(levels=40, indent="  ") -> str:
    """A billion-laughs mapping: 2**levels values once its aliases are expanded, a few lines of text."""
    lines = ["a0: &a0 [lol, lol]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, levels)]
    return "\n".join(indent + line for line in lines) + "\n"


def _dry(work, *args, profile=True, timeout=120, quiet=True, dry=True):
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        *(["-n"] if dry else []),
        *args,
        *(["-q"] if quiet else []),
    ]  # -q last: it takes words after it
    if not profile:
        cmd += ["--workflow-profile", "none"]
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=work, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    return res.returncode, res.stdout + res.stderr


YTE = "__use_yte__: true\n" + SMOKE_TEXT.replace(
    "\nseed: 0\n", "\nseed: ?__import__('pathlib').Path('MARKER').touch() or 0\n"
)


def test_check_config_refuses_a_yte_file_without_running_it(tmp_path, monkeypatch, capsys):
    """`orthrus check-config FILE` reads a file with `__use_yte__` and a ?-expression as data: refused
    in one line naming file and line, the expression never run; a plain config passes."""
    from orthrus.cli import main

    assert "?__import__" in YTE
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.yaml").write_text(YTE)
    assert main(["check-config", "evil.yaml"]) == 2 and not (tmp_path / "MARKER").exists()
    assert "evil.yaml:1: __use_yte__ refused" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text(SMOKE_TEXT)
    assert main(["check-config"]) == 0 and "config.yaml: a valid study config" in capsys.readouterr().out


@pytest.mark.parametrize("profile", [True, False], ids=["workflow profile", "--workflow-profile none"])
def test_yte_config_file_is_refused_by_the_snakefile_after_snakemake_rendered_it(tmp_path, profile):
    """A `--configfile` with `__use_yte__`: Snakemake renders it while it reads its command line,
    before any code of this workflow runs (docs/CONFIG.md says so, and to run `orthrus check-config`
    first); the Snakefile refuses it in one line naming the file, with or without the profile."""
    (tmp_path / "config.yaml").write_text(SMOKE_TEXT)
    (tmp_path / "evil.yaml").write_text(YTE)
    rc, out = _dry(tmp_path, "--configfile", "evil.yaml", profile=profile)
    assert rc != 0 and not (tmp_path / "results").exists(), out
    lines = [line for line in out.splitlines() if "refused" in line]
    assert len(lines) == 1 and "evil.yaml:1: __use_yte__ refused" in lines[0], out
    # what docs/CONFIG.md warns of; should this fail, Snakemake no longer renders it: say so there
    assert (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("profile", [True, False], ids=["workflow profile", "--workflow-profile none"])
def test_yte_embedded_config_is_read_as_data_and_refused(tmp_path, profile):
    """The embedded config.yaml is read by the Snakefile alone, as data: never rendered."""
    (tmp_path / "config.yaml").write_text(YTE)
    rc, out = _dry(tmp_path, profile=profile)
    assert rc != 0 and not (tmp_path / "MARKER").exists(), out
    assert "config.yaml:1: __use_yte__ refused" in out


def test_the_profiles_hold_settings_not_code():
    """No YTE, no tag, no ?-expression in a profile: nothing of a profile runs as Python."""
    for path in sorted((ROOT / "profiles").rglob("*.yaml")):
        text = path.read_text()
        assert yaml_hazards(text, str(path)) == [], path  # __use_yte__ and tags
        values = [yaml.safe_load(text)]
        while values:
            v = values.pop()
            if isinstance(v, dict):
                assert "__definitions__" not in v and "__variables__" not in v, path
                values += [*v.keys(), *v.values()]
            elif isinstance(v, list):
                values += v
            else:
                assert not str(v).startswith("?"), (path, v)


def test_workflow_scripts_are_run_not_imported():
    """workflow/scripts holds scripts (`bash workflow/scripts/rehearse.sh`); what the workflow and
    the tests import lives in the package: no sys.path entry, no module loaded from that folder."""
    code = [ROOT / "Snakefile", *ROOT.glob("workflow/rules/*.smk"), *ROOT.glob("tests/*.py")]
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in code
        for m in re.finditer(r"sys\.path\.insert\(.*|spec_from_file_location\(.*workflow/scripts.*", p.read_text())
        if p.suffix != ".py" or "spec_from_file_location" in m.group(0)
    ]
    assert not found, found
    assert not list((ROOT / "workflow/scripts").glob("*.py")) or all(
        "__main__" in p.read_text() for p in (ROOT / "workflow/scripts").glob("*.py")
    )


def _invalid(out: str) -> list[str]:
    """The problem lines of the ConfigError a run printed (Snakemake adds the traceback's `File` lines)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "invalid configuration:" in line)
    return [line.strip() for line in lines[start + 1 :] if line.startswith("  ") and not line.startswith("  File ")]


def test_every_way_of_starting_the_workflow_gives_the_same_error(tmp_path):
    """One bad key, the same lines from the one check whether the workflow is started plainly, under
    the cluster profile, without the workflow profile or with the file as `--configfile`."""
    bad = SMOKE_TEXT.replace("\nseed: 0\n", "\nseed: zero\n")
    assert bad != SMOKE_TEXT
    (tmp_path / "config.yaml").write_text(bad)
    (tmp_path / "given").mkdir()
    (tmp_path / "given" / "bad.yaml").write_text(bad)
    runs = {
        "plain": _dry(tmp_path),
        "--profile profiles/slurm": _dry(tmp_path, "--profile", str(ROOT / "profiles/slurm")),
        "--workflow-profile none": _dry(tmp_path, profile=False),
        "--configfile": _dry(tmp_path / "given", "--configfile", "bad.yaml"),
    }
    errors = {how: (rc, _invalid(out)) for how, (rc, out) in runs.items()}
    assert errors["plain"][0] != 0 and errors["plain"][1] == ["seed: 'zero' is not of type 'integer'"], runs["plain"]
    assert all(e == errors["plain"] for e in errors.values()), errors
    assert not list(tmp_path.rglob("results"))


HAZARDS = [
    ("python object tag", "seed: !!python/object/apply:os.system ['touch MARKER']\n", "YAML tag"),
    ("python name tag", "seed: !!python/name:os.system\n", "YAML tag"),
    ("local tag", "teacher: !teacher {name: t}\n", "YAML tag"),
    ("non-specific tag", "seed: ! 3\n", "YAML tag"),
    ("standard tag", "seed: !!int 3\n", "YAML tag"),
    ("tag on a list", "decode:\n  precisions: !!python/tuple [fp32]\n", "YAML tag"),
    ("use_yte false", "__use_yte__: false\nseed: 0\n", "__use_yte__ refused"),
    ("list alias bomb", "bomb:\n" + _bomb(), "alias bomb"),
    (
        "bomb in data_files",
        "corpus:\n  source: hf\n  dataset: json\n  data_files: &top\n" + _bomb(indent="    ") + "  split: *top\n",
        "alias bomb",
    ),
    (
        "mapping alias bomb",
        "a0: &a0 {x: 1, y: 1}\n" + "".join(f"a{i}: &a{i} {{p: *a{i - 1}, q: *a{i - 1}}}\n" for i in range(1, 30)),
        "alias bomb",
    ),
    ("deep nesting", "seed: " + "[" * 100 + "]" * 100 + "\n", "nested deeper"),
    ("huge file", "seed: 0\n" + "#" * (2**20 + 1) + "\n", "larger than"),
]


@pytest.mark.parametrize("name, text, what", HAZARDS, ids=[h[0] for h in HAZARDS])
def test_config_text_that_is_more_than_data_is_refused(tmp_path, name, text, what):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    problems = file_hazards(path)
    assert len(problems) == 1 and what in problems[0] and str(path) in problems[0], problems
    with pytest.raises(ConfigError) as err:
        study_config([path])
    assert err.value.problems == problems


def test_plain_config_data_with_aliases_passes(tmp_path):
    """Anchors and aliases that stay small, nested keys named like YTE's, quoted '?...' strings: data."""
    text = SMOKE_TEXT + "x: &x [1, 2]\ny: *x\nz: {__use_yte__: 1}\nq: '?not code'\n"
    assert yaml_hazards(text, "c") == []
    for path in [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]:
        assert file_hazards(path) == [], path


@pytest.mark.slow
def test_alias_bomb_is_rejected_quickly_in_a_dry_run(tmp_path):
    """A billion laughs inside `corpus.data_files`, as a --configfile and as the embedded config."""
    import time

    items = "".join(f"    - &a{i} [{f'*a{i - 1}, *a{i - 1}' if i else 'lol, lol'}]\n" for i in range(40))
    bomb = SMOKE_TEXT.replace("\ncorpus:\n", "\ncorpus:\n  data_files:\n" + items, 1)
    assert bomb != SMOKE_TEXT
    (tmp_path / "config.yaml").write_text(SMOKE_TEXT)
    (tmp_path / "bomb.yaml").write_text(bomb)
    start = time.monotonic()
    rc, out = _dry(tmp_path, "--configfile", "bomb.yaml", timeout=60)
    assert rc != 0 and "bomb.yaml" in out and "alias bomb" in out, out
    (tmp_path / "config.yaml").write_text(bomb)
    rc, out = _dry(tmp_path, profile=False, timeout=60)
    assert rc != 0 and "config.yaml" in out and "alias bomb" in out, out
    assert time.monotonic() - start < 40


def test_alias_bomb_in_a_parsed_config_is_bounded():
    """A config built of shared references (a --config value, an API caller) is counted, not walked."""
    node = ["lol"]
    for _ in range(60):
        node = [node, node]
    with pytest.raises(ConfigError, match="more than 100000 values"):
        study_config(values={"corpus": {"data_files": node}})


def test_free_form_data_files_are_bounded(tmp_path):
    problems = _check(_config_text(_set("corpus.data_files", ["f.jsonl"] * 10001)), tmp_path)
    assert any(p.startswith("corpus.data_files:") for p in problems), problems


def test_nested_config_overrides_are_typed_by_the_model():
    """Snakemake reads `decode={max_new_tokens: 8}` with YAML's base loader (every value a string):
    where the model's key takes no string, the value is read as YAML; strings stay strings."""
    got = typed_overrides(
        {
            "decode": {"max_new_tokens": "8", "own_ar_view": "false", "message": "8", "precisions": ["fp32"]},
            "teacher": {"name": "123"},
            "corpus": "{shards: 2}",
            "seed": 3,
            "models": {"m": "null", "n": {"betas": ["0.9", "0.99"], "lr": "1.0e-3"}},
            "benchmarks": {"n_docs": {"tiny_qa": "3"}, "tiny_tasks": "[tiny_qa]"},
        },
    )
    assert got == {
        "decode": {"max_new_tokens": 8, "own_ar_view": False, "message": "8", "precisions": ["fp32"]},
        "teacher": {"name": "123"},
        "corpus": {"shards": 2},
        "seed": 3,
        "models": {"m": None, "n": {"betas": [0.9, 0.99], "lr": 1e-3}},
        "benchmarks": {"n_docs": {"tiny_qa": 3}, "tiny_tasks": ["tiny_qa"]},
    }
    with pytest.raises(ConfigError, match="YAML tag"):
        typed_overrides({"corpus": "{shards: !!python/name:os.system x}"})


@pytest.mark.slow
def test_nested_config_override_in_a_dry_run(tmp_path):
    (tmp_path / "config.yaml").write_text(SMOKE_TEXT)
    rc, out = _dry(tmp_path, "--config", "decode={max_new_tokens: 8}", "-p", quiet=False)
    assert rc == 0, out[-2000:]
    assert '"max_new_tokens": 8' in out and '"max_new_tokens": 16' not in out


# --------------------------------------------------------------------------- changed inputs, odd paths


@pytest.mark.slow
def test_changed_eval_file_and_teacher_weights_rerun_their_dependents(tmp_path):
    """A directory output's timestamp is Snakemake's own, and the eval file is no Snakemake input:
    content fingerprints in params (common.smk) rerun the prompts job after the eval file changed
    (its mtime kept), and the draft's training after the teacher's weights changed."""
    cfg = yaml.safe_load(SMOKE_TEXT)
    cfg["teacher"]["tiny"] |= {"steps": 2, "warmup_steps": 1}  # a warm-up must end within the run
    cfg["teacher"]["draft"]["tiny"] |= {"steps": 1, "warmup_steps": 0}
    cfg["prompts"]["eval_file"] = "eval.json"
    cfg["sampling"]["two_sample"]["domains"] = ["qa"]  # the sampled engines' domains must be the file's
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "eval.json").write_text('{"qa": ["What is one?", "What is two?"]}')
    targets = ["results/draft", "results/prompts/eval.parquet"]
    rc, out = _dry(tmp_path, "-c2", *targets, timeout=600, dry=False)
    assert rc == 0, out[-3000:]
    rc, out = _dry(tmp_path, *targets)
    assert rc == 0 and "Nothing to be done" in out, out[-3000:]
    st = os.stat(tmp_path / "eval.json")
    (tmp_path / "eval.json").write_text('{"qa": ["What is one?", "What is six?"]}')
    os.utime(tmp_path / "eval.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    weights = tmp_path / "results/teacher/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    rc, out = _dry(tmp_path, *targets, quiet=False)
    assert rc == 0 and "rule prompts:" in out and "rule train_draft:" in out and "rule train_teacher:" not in out, out[
        -3000:
    ]
    assert out.count("Params have changed") == 2, out[-3000:]


@pytest.mark.slow
def test_braces_in_a_model_path_are_no_wildcards(tmp_path):
    """An external model at a path with braces: no WildcardError, the path reaches the job as given."""
    ext = tmp_path / "ext{x}"
    ext.mkdir()
    (ext / "config.json").write_text("{}")
    (ext / "model.safetensors").write_bytes(b"")
    cfg = yaml.safe_load(SMOKE_TEXT)
    cfg["external_models"] = {"ext": str(ext)}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    rc, out = _dry(tmp_path, "-p", quiet=False)
    assert rc == 0 and "WildcardError" not in out, out[-3000:]
    assert f"--model-path {ext}" in out or f"--model-path '{ext}'" in out


def test_glob_characters_in_a_local_dataset_path_are_refused(tmp_path):
    """datasets reads a local path as a pattern: one line naming the key (config) or the dataset (library)."""
    from orthrus.data.hf_corpus import load_split
    from orthrus.errors import InputError

    data = tmp_path / "data[1]"
    data.mkdir()
    (data / "train.jsonl").write_text('{"prompt": "a", "response": "b"}\n')
    problems = _check(_config_text(_both(_set("corpus.source", "hf"), _set("corpus.dataset", str(data)))), tmp_path)
    assert any(p.startswith("corpus.dataset:") and "glob characters" in p for p in problems), problems
    with pytest.raises(InputError, match=r"glob characters"):
        load_split(str(data))


# --------------------------------------------------------------------------- issue 35: scatter, seeds, the checked-where table


@pytest.mark.parametrize(
    "scatter, where",
    [
        ({"corpus": 0}, "--set-scatter corpus=0"),
        ({"decode": 5000}, "--set-scatter decode=5000"),
        ({"corpsu": 2}, "--set-scatter corpsu=2"),
        ({"corpus": 33}, "--set-scatter corpus:"),
    ],
)
def test_set_scatter_counts_are_checked_with_the_config(scatter, where):
    """`--set-scatter corpus=0` (Snakemake itself takes 0) or more shards than distillation prompts
    (32 in the smoke config) is refused naming the option."""
    with pytest.raises(ConfigError) as err:
        study_config(values=SMOKE, scatter=scatter)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(where), err.value.problems
    study_config(values=SMOKE, scatter={"corpus": 32, "decode": 3})


@pytest.mark.slow
def test_set_scatter_zero_stops_a_real_dry_run(tmp_path):
    (tmp_path / "config.yaml").write_text(SMOKE_TEXT)
    rc, out = _dry(tmp_path, "--set-scatter", "corpus=0")
    assert rc != 0 and "--set-scatter corpus=0: a scatter count is 1 to 4096" in out, out[-2000:]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("seed", [2**32, 2**63, 2**64 - 1])
def test_huge_but_legal_seeds_are_accepted_silently(seed):
    """Any seed torch's and numpy's generators take (0 .. 2^64 - 1) passes; lm-eval's numpy seed is
    taken modulo 2^32 (orthrus/lmeval/run.py)."""
    cfg = copy.deepcopy(SMOKE)
    cfg["seed"] = seed
    study_config(values=cfg)


def test_a_file_url_is_checked_like_a_path(tmp_path):
    """A file URL of a regular file passes, one of a FIFO is refused before any job."""
    (tmp_path / "p.json").write_text('{"qa": ["What is 2+2?"]}')
    os.mkfifo(tmp_path / "fifo")
    cfg = copy.deepcopy(SMOKE)
    cfg["prompts"]["eval_file"] = (tmp_path / "p.json").as_uri()
    study_config(values=cfg)
    cfg = copy.deepcopy(SMOKE)
    cfg["prompts"]["eval_file"] = (tmp_path / "fifo").as_uri()
    with pytest.raises(ConfigError, match="prompts.eval_file: .* is not a regular file"):
        study_config(values=cfg)
