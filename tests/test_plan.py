"""The study plan (orthrus/plan): cells, paths and each job's arguments, computed from a checked
config without Snakemake, by the whole `Study` and by each stage's plan on its own.
tests/test_workflow.py checks that the workflow runs what the plan says."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from orthrus.errors import ConfigError
from orthrus.plan import Study
from orthrus.plan.analysis_plan import AnalysisPlan
from orthrus.plan.benchmarks_plan import BenchmarksPlan
from orthrus.plan.config import StudyConfig
from orthrus.plan.data_plan import DataPlan
from orthrus.plan.decode_plan import DecodePlan
from orthrus.plan.engines_plan import EnginesPlan
from orthrus.plan.fingerprints import fingerprint, weights_fingerprint
from orthrus.plan.models_plan import ModelsPlan
from orthrus.plan.report_plan import ReportPlan
from orthrus.plan.rule_args import cell_options, rule_name, scatter_index
from orthrus.plan.sampling_plan import SamplingPlan
from orthrus.plan.study_config import load

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


def generated_defaults() -> dict[tuple[str, ...], object]:
    """{path of a schema property: its default}, for the defaults a settings object of the package
    holds: the schema must carry them, and no module restate them."""
    from orthrus import options
    from orthrus.audit.verdict import ROUNDING_ULPS
    from orthrus.decode import frontier
    from orthrus.distill.settings import DEFAULTS as TRAIN
    from orthrus.world.settings import DEFAULTS as TINY

    out: dict[tuple[str, ...], object] = {}
    for k, v in TRAIN.items():
        out[("$defs", "Settings", "properties", k)] = v
    for k, v in TINY.items():
        out[("$defs", "TinyTeacher", "properties", k)] = v
    decode = ("$defs", "Decode", "properties")
    fields = {f.name: f.default for f in dataclasses.fields(options.DecodeOptions)}
    for k in options.CONFIG_KEYS:
        out[decode + (k,)] = fields[k]
    out[decode + ("noise_batch_size",)] = options.NOISE_BATCH_SIZE
    out[decode + ("oracle_block_size",)] = options.ORACLE_BLOCK_SIZE
    out[("$defs", "Analysis", "properties", "rounding_ulps")] = dict(ROUNDING_ULPS)
    for k, v in frontier.DEFAULTS.items():
        out[("$defs", "Frontier", "properties", k)] = v
    for k, v in frontier.BASE.items():
        out[("$defs", "Base", "properties", k)] = v
    return out


def checked(path="tests/smoke/config.yaml", mutate=None) -> StudyConfig:
    """The config at `path`, changed by `mutate`, then checked and defaulted."""
    cfg = yaml.safe_load((ROOT / path).read_text())
    if mutate:
        mutate(cfg)
    return load(values=cfg)


def study(path="tests/smoke/config.yaml", mutate=None) -> Study:
    return Study(checked(path, mutate))


def w(**kw):
    return SimpleNamespace(**kw)


def test_the_default_study_is_its_cells():
    s = study("config.yaml")
    assert s.models.orthrus == ["ce-k8", "kl-k8"] and s.models.teacher == "teacher"
    # bf16: every prompt for the reference, the Orthrus loops and assisted; fp32: subsets, and the
    # reference on the most of them
    assert s.decode.cells("ar-ref") == [("bf16", "sdpa"), ("fp32", "sdpa")]
    assert (
        s.decode.cell_prompts("ar-ref", None, "bf16") == [] and s.decode.cell_prompts("orthrus", "ce-k8", "bf16") == []
    )
    assert s.decode.cell_prompts("assisted", None, "bf16") == []
    assert s.decode.cell_prompts("assisted", None, "fp32") == ["--prompts-per-domain", 2]
    assert s.decode.cell_prompts("orthrus", "kl-k8", "fp32") == ["--prompts-per-domain", 4]
    assert s.decode.cell_prompts("ar-ref", None, "fp32") == ["--prompts-per-domain", 4]
    files = s.decode.files()
    assert len(files) == len(set(files))
    assert "results/decode/ce-k8/orthrus-bf16-sdpa.parquet" in files
    assert "results/decode/teacher/ar-ref-fp32-sdpa.parquet" in files
    # the lossy control runs on each Orthrus model, only where its grid says
    lossy = [f for f in files if "/orthrus-lossy-" in f]
    assert lossy and all(f.split("/")[2] in s.models.orthrus for f in lossy)


def test_a_narrowed_model_and_decoder_keep_the_reference_on_the_full_grid():
    def narrow(cfg):
        ce = cfg["models"]["smoke-ce"]
        cfg["models"] = {"smoke-ce": ce, "smoke-kl": {**ce, "objective": "kl"}, "smoke-klb": ce}
        cfg["decode"]["grids"] = {
            "prompt-lookup": {"attentions": ["sdpa"], "prompts_per_domain": 2},
            "assisted": {"prompts_per_domain": {"fp32": 3}},
            "smoke-kl": {"attentions": ["sdpa"]},
        }
        cfg["decode"]["controls"], cfg["decode"]["external"] = [], {}

    s = study(mutate=narrow)
    full = [(p, a) for p in ("bf16", "fp32") for a in ("eager", "sdpa")]
    sdpa = [(p, "sdpa") for p in ("bf16", "fp32")]
    assert s.decode.cells("ar-ref") == full and s.decode.cells("prompt-lookup") == sdpa
    assert s.decode.cells("orthrus", "smoke-kl") == sdpa and s.decode.cells("ar", "smoke-kl") == sdpa
    assert s.decode.cells("orthrus", "smoke-klb") == full  # a name another begins with is not narrowed
    assert s.decode.cell_prompts("prompt-lookup", None, "bf16") == ["--prompts-per-domain", 2]
    assert s.decode.cell_prompts("assisted", None, "fp32") == ["--prompts-per-domain", 3]
    assert s.decode.cell_prompts("assisted", None, "bf16") == []
    decoded = s.analysis.forensics_decoded(w(model="smoke-kl"))
    assert decoded == [f"results/decode/smoke-kl/orthrus-{p}-{a}.parquet" for p, a in sdpa]
    assert s.analysis.forensics_reference(w(model="smoke-kl")) == [
        f"results/decode/teacher/ar-ref-{p}-{a}.parquet" for p, a in sdpa
    ]


def test_the_reference_decodes_the_most_prompts_a_cell_of_its_precision_does(tmp_path):
    def narrow(cfg, lossy: int | None = 1):
        cfg["decode"]["grids"] = {
            "prompt-lookup": {"prompts_per_domain": {"bf16": 2, "fp32": 1}},
            "assisted": {"prompts_per_domain": {"fp32": 1}, "precisions": ["fp32"]},
            "oracle": {"prompts_per_domain": 1},
            "ar-batched": {"prompts_per_domain": 1},
            "orthrus-lossy": {"precisions": ["bf16"]} | ({"prompts_per_domain": lossy} if lossy else {}),
            "smoke-ce": {"prompts_per_domain": {"bf16": 2, "fp32": 1}},
            "smoke-kl": {"prompts_per_domain": 1},
        }
        cfg["decode"]["external"] = {}

    s = study(mutate=narrow)
    assert s.decode.cell_prompts("ar-ref", None, "bf16") == ["--prompts-per-domain", 2]
    assert s.decode.cell_prompts("ar-ref", None, "fp32") == ["--prompts-per-domain", 1]
    # a cell that decodes every prompt (here the lossy loop, unnarrowed) keeps every prompt in the reference
    s = study(mutate=lambda c: narrow(c, lossy=None))
    assert s.decode.cell_prompts("ar-ref", None, "bf16") == []
    assert s.decode.cell_prompts("ar-ref", None, "fp32") == ["--prompts-per-domain", 1]

    # an engine's file at a precision: its prompts are its own, so the reference decodes every prompt there
    f = tmp_path / "engine.jsonl"
    f.write_text("")

    def engine(cfg):
        narrow(cfg)
        cfg["decode"]["external"] = {"eng": {"path": str(f), "precision": "fp32", "attention": "sdpa"}}

    s = study(mutate=engine)
    assert s.decode.cell_prompts("ar-ref", None, "fp32") == []
    assert s.decode.cell_prompts("ar-ref", None, "bf16") == ["--prompts-per-domain", 2]


def test_each_decoder_gets_its_model_draft_and_reference():
    s = study()
    assisted = w(model="teacher", decoder="assisted", precision="bf16", attention="sdpa")
    oracle = w(model="teacher", decoder="oracle", precision="fp32", attention="eager")
    loop = w(model="smoke-ce", decoder="orthrus", precision="bf16", attention="sdpa")
    assert s.decode.model_arg(assisted) == s.models.teacher_path() == "results/teacher"  # the smoke teacher is trained
    assert s.decode.draft_args(assisted) == ["--draft-path", "results/draft"] and s.decode.draft_args(loop) == []
    assert s.decode.reference_input(oracle) == ["results/decode/teacher/ar-ref-fp32-eager.parquet"]
    assert s.decode.reference_input(loop) == [] and s.decode.model_arg(loop) == "results/models/smoke-ce"
    opts = json.loads(cell_options(s.config.decode.model_dump(), "orthrus", "bf16", "sdpa"))
    assert (opts["decoder"], opts["precision"], opts["attention"]) == ("orthrus", "bf16", "sdpa")
    assert opts["max_new_tokens"] == s.config.decode.max_new_tokens


def test_the_global_seed_is_added_to_each_variants_own():
    s = study(mutate=lambda c: c.update(seed=7))
    assert s.models.variant_settings("smoke-ce")["seed"] == 7 + s.config.models["smoke-ce"].seed


def test_the_shipped_subject_is_checked_before_any_job(monkeypatch):
    from orthrus.plan import models_plan

    models_plan._check_shipped_subject.cache_clear()
    monkeypatch.setattr(models_plan.shipped_subject, "check", lambda: ["teacher/model.safetensors: sha256 differs"])
    s = study("config.yaml")
    with pytest.raises(ConfigError, match="teacher.source: the shipped subject is damaged: teacher/model.safetensors"):
        s.models.teacher_path()
    models_plan._check_shipped_subject.cache_clear()


def test_an_engine_file_outside_the_grid_is_refused_naming_the_key(tmp_path):
    traj = tmp_path / "engine.jsonl"
    traj.write_text(json.dumps({"id": "x", "tokens": [1], "env": {"dtype": "float16", "kernel": "sdpa"}}) + "\n")

    def engine(cfg):
        cfg["decode"]["external"] = {"eng": {"path": str(traj)}}

    with pytest.raises(ConfigError, match=r"decode\.external\.eng\.precision: 'fp16' .* not in the decode grid"):
        study(mutate=engine)


def test_outputs_and_benchmarks_follow_the_config():
    s = study("config.yaml")
    out = s.report.final_outputs(["results/corpus/shard_1-of-2.parquet"])
    assert "results/tables/claims.csv" in out and "results/tables/benchmarks.csv" in out
    assert "results/tables/exactness_cost.csv" in out and s.decode.frontier_files() == [
        "results/frontier/ce-k8.parquet"
    ]
    assert s.benchmarks.tasks() == ",".join(s.config.benchmarks.tiny_tasks)
    assert s.benchmarks.files()[0] == f"results/benchmarks/teacher/ar-bf16-{s.config.benchmarks.attention}.json"
    bare = study(
        "config.yaml",
        lambda c: (
            c.update(models={}),
            c["decode"].update(decoders=[], controls=[], grids={}),
            c["benchmarks"].update(enabled=False),
            c["frontier"].update(enabled=False),
        ),
    )
    corpus = ["results/corpus/shard_1-of-2.parquet"]
    assert bare.report.final_outputs(corpus) == corpus + bare.decode.files()  # nothing to compare: corpus and decodings


def test_helpers():
    assert scatter_index("2-of-4") == (1, 4)
    used = set()
    assert [rule_name("engine.a-b", used), rule_name("engine.a-b", used)] == ["engine_a_b", "engine_a_b_2"]


def test_fingerprints_change_with_the_weights_and_prefer_the_writers_sidecar(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    assert weights_fingerprint(str(model), "owner/hub-id") == ","  # nothing yet; a hub id has no files
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"a")
    first = weights_fingerprint(str(model))
    (model / "model.safetensors").write_bytes(b"bb")
    assert weights_fingerprint(str(model)) != first
    f = model / "model.safetensors"
    st = f.stat()
    (tmp_path / "m" / "model.safetensors.sha256").write_text(
        json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": "cafe"})
    )
    from orthrus.plan.fingerprints import file_fingerprint

    assert file_fingerprint(f) == "cafe" and fingerprint([]) == ""


def test_a_local_dataset_and_eval_file_are_fingerprinted(tmp_path):
    data = tmp_path / "ds"
    data.mkdir()
    (data / "train.jsonl").write_text("{}\n")
    evalf = tmp_path / "prompts.json"
    evalf.write_text('{"qa": ["x"], "code": ["y"], "math": ["z"]}')  # the domains the smoke's engines sample
    s = study()
    cfg = s.config.model_dump()
    cfg["corpus"].update(source="hf", dataset=str(data))
    cfg["prompts"]["eval_file"] = str(evalf)
    s2 = Study(cfg)
    assert s.data.dataset_fingerprint() == "" and s2.data.dataset_fingerprint() != ""
    assert len(s2.data.eval_file_fingerprint()) == 64
    assert s2.data.corpus_source_args(None, None)[:2] == ["--dataset", str(data)]


def test_the_schema_is_generated_from_the_config_model():
    """The committed schema and docs/CONFIG.md are what the config model generates (python -m
    orthrus.plan.config.generate), and the schema carries every default a settings object of the package holds."""
    from orthrus.plan.config import generate

    assert generate.main(["--check"]) == 0, "run: python -m orthrus.plan.config.generate"
    loaded = yaml.safe_load(SCHEMA.read_text())
    for path, v in generated_defaults().items():
        node = loaded
        for k in path:
            node = node[k]
        assert node["default"] == (list(v) if isinstance(v, tuple) else v), ".".join(path)


def test_a_changed_setting_makes_the_committed_schema_stale(tmp_path):
    """A default changed in the code (a variant's lr, the decoding options' message) changes the
    generated schema, and --check then fails on the committed file: the check can fail."""
    from orthrus.plan.config import generate

    code = (
        "import sys; from orthrus.distill.settings import Settings\n"
        "Settings.model_fields['lr'].default = 0.125; Settings.model_rebuild(force=True)\n"
        "from orthrus.options import DecodeOptions\n"
        "DecodeOptions.message = 'none'\n"
        "from orthrus.plan.config import generate; sys.stdout.write(generate.schema_text())"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    text = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    new = yaml.safe_load(text)["$defs"]
    assert new["Settings"]["properties"]["lr"]["default"] == 0.125
    assert new["Decode"]["properties"]["message"]["default"] == "none"
    changed = tmp_path / "config.schema.yaml"
    changed.write_text(text)
    assert generate.main(["--check", "--schema", str(changed)]) == 1
    changed.write_text(generate.schema_text())
    assert generate.main(["--check", "--schema", str(changed)]) == 0


def test_each_setting_of_the_code_is_a_key_of_the_config():
    """A variant's settings are the config's `models.<name>` section itself, and the tiny teacher's and
    the draft's are the section `orthrus train-teacher` reads, so no setting is in one and not the other."""
    from typing import get_args

    from orthrus.distill.settings import Settings
    from orthrus.plan.config.teacher import Draft, Teacher
    from orthrus.world.settings import TinyTeacher

    assert Settings in get_args(get_args(StudyConfig.model_fields["models"].annotation)[1])
    assert Teacher.model_fields["tiny"].annotation is TinyTeacher is Draft.model_fields["tiny"].annotation


# the modules that state the defaults (the config model's sections and the settings objects they take them from)
SETTINGS_MODULES = {
    "orthrus/distill/settings.py",
    "orthrus/world/teacher.py",
    "orthrus/options.py",
    "orthrus/audit/verdict.py",
    "orthrus/decode/frontier.py",
    *(f"orthrus/plan/config/{p.name}" for p in (ROOT / "orthrus/plan/config").glob("*.py")),
}
ALIASES = {"max_gen_toks": "max_new_tokens", "rounding_ulps": "rounding_ulps"}


def _literal(node) -> bool:
    import ast

    return (
        isinstance(node, ast.Constant)
        and node.value is not None
        and not isinstance(node.value, bool)
        or (
            isinstance(node, (ast.List, ast.Tuple, ast.Dict))
            and all(
                _literal(e)
                for e in ast.walk(node)
                if isinstance(e, ast.expr) and e is not node and not isinstance(e, ast.Load)
            )
        )
    )


def test_no_generated_default_is_stated_again_outside_its_settings():
    """No `.get("key", literal)`, `add_argument("--key", default=literal)` or `def f(key=literal)`
    in the package for a key whose default the settings state (orthrus/plan/config/): a second
    statement drifts (export-prompts' --max-new-tokens 128 beside the study's 224 did)."""
    import ast

    values = {}
    for path, v in generated_defaults().items():
        values.setdefault(path[-1], []).append(list(v) if isinstance(v, tuple) else v)
    keys = set(values) - {"seed", "threads", "description"}

    def same(key, node):  # the literal equals a default the settings state for `key`
        try:
            return _literal(node) and ast.literal_eval(node) in values[key]
        except ValueError:
            return False

    found = []
    for f in sorted((ROOT / "orthrus").rglob("*.py")):
        rel = str(f.relative_to(ROOT))
        if rel in SETTINGS_MODULES:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            hits = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                a = node.args
                if node.func.attr == "get" and len(a) == 2 and isinstance(a[0], ast.Constant) and a[0].value in keys:
                    hits += [a[0].value] if same(a[0].value, a[1]) else []
                if node.func.attr == "add_argument" and a and isinstance(a[0], ast.Constant):
                    name = str(a[0].value).lstrip("-").replace("-", "_")
                    name = ALIASES.get(name, name)
                    hits += [name for k in node.keywords if k.arg == "default" and name in keys and same(name, k.value)]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = (
                    [None] * (len(node.args.args) - len(node.args.defaults))
                    + node.args.defaults
                    + node.args.kw_defaults
                )
                hits += [
                    ALIASES.get(x.arg, x.arg)
                    for x, d in zip(args, defaults)
                    if d is not None and ALIASES.get(x.arg, x.arg) in keys and same(ALIASES.get(x.arg, x.arg), d)
                ]
            found += [f"{rel}:{node.lineno}: {h}" for h in hits]
    assert not found, "defaults stated outside their settings:\n" + "\n".join(found)


def test_the_sampling_audit_joins_the_outputs_only_when_enabled():
    off = study("config.yaml", lambda c: c["sampling"].update(enabled=False))
    assert off.sampling.model() is None and off.sampling.outputs() == []
    on = study("config.yaml")
    assert on.sampling.model() == "ce-k8"
    out = on.report.final_outputs([])
    assert "results/tables/sampling_tv.csv" in out and "results/tables/sampling_two_sample.csv" in out
    assert on.sampling.tables() == [f for f in on.sampling.outputs() if f.startswith("results/tables/")]


# ---------------------------------------------------------------------- each stage's plan on its own:
# built from a checked config and the plans it reads (real ones, or stand-ins with the same names)

DEFAULT = "config.yaml"
NO_ENGINES = SimpleNamespace(cells={}, entries={})


def test_the_models_plan_says_where_each_model_is():
    m = ModelsPlan(checked(DEFAULT))
    assert (m.teacher, m.trained, m.orthrus) == ("teacher", ["ce-k8", "kl-k8"], ["ce-k8", "kl-k8"])
    assert m.path("ce-k8") == m.input(w(model="ce-k8")) == "results/models/ce-k8"  # built by the train rule
    # the default's teacher and draft ship with the package: their files are the jobs' inputs
    assert m.path("teacher") == m.teacher_path() and Path(m.teacher_path()).match("world/subject/teacher")
    assert m.input(w(model="teacher")) == m.teacher_input()
    assert "model.safetensors" in {Path(f).name for f in m.teacher_input()}
    assert m.draft_files() and all(Path(f).parent == Path(m.draft_path()) for f in m.draft_files())
    # an external checkpoint by hub id: pinned to its revision, no local files
    ext = ModelsPlan(
        checked(DEFAULT, lambda c: c.update(external_models={"ext": "org/m"}, revisions={"org/m": "0" * 40}))
    )
    assert ext.orthrus == ["ce-k8", "kl-k8", "ext"]
    assert ext.path("ext") == "org/m@" + "0" * 40 and ext.input(w(model="ext")) == []


def test_the_data_plan_gives_the_corpus_its_source():
    cfg = checked(DEFAULT)
    d = DataPlan(cfg, ModelsPlan(cfg))
    assert d.corpus_source_args(None, w(prompts="p.parquet")) == ["--prompts", "p.parquet"]
    assert d.eval_file_fingerprint() == d.dataset_fingerprint() == ""  # the tiny world's prompts, no dataset


def test_the_engines_plan_places_each_file_and_its_reference(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text("")
    plain = {"path": str(f), "precision": "bf16", "attention": "sdpa"}
    cfg = checked(
        DEFAULT, lambda c: c["decode"].update(external={"plain": plain, "spec": {**plain, "reference": "plain"}})
    )
    e = EnginesPlan(cfg)
    assert e.cells == {"plain": ("bf16", "sdpa"), "spec": ("bf16", "sdpa")}
    assert e.file("spec") == "results/decode/spec/external-bf16-sdpa.parquet"
    assert e.reference_file("plain") == "results/decode/teacher/ar-ref-bf16-sdpa.parquet"  # the reference of its cell
    assert e.reference_file("spec") == e.file("plain") and e.plain_references() == [e.file("plain")]
    assert EnginesPlan(checked(DEFAULT)).entries == {}


def test_the_decode_plan_runs_each_decoder_on_its_model_and_cells():
    cfg = checked(DEFAULT, lambda c: c["decode"].update(own_ar_view=True))
    models = ModelsPlan(cfg)
    d = DecodePlan(cfg, models, NO_ENGINES)
    # the loop, the AR view, the model's control: in this order (the analyze job's --decode order)
    assert d.model_decoders == ["orthrus", "ar", "orthrus-lossy"]
    assert d.teacher_runs == ["ar-ref", "prompt-lookup", "assisted", "oracle", "ar-batched"]
    assert d.cells("orthrus-lossy", "ce-k8") == [("bf16", "sdpa")] and d.cells("ar", "ce-k8") == d.cells("ar-ref")
    assert d.cell_prompts("ar-ref", None, "fp32") == ["--prompts-per-domain", 4]
    assert d.frontier_files() == ["results/frontier/ce-k8.parquet"] and d.tpf_files() == []
    cell = w(model="teacher", decoder="assisted", precision="fp32", attention="sdpa")
    assert d.draft_input(cell) == models.draft_files() and d.draft_args(cell) == ["--draft-path", models.draft_path()]
    assert d.model_arg(cell) == models.teacher_path() and d.reference_input(cell) == []
    # an engine's file at fp32, whose prompts are its own: the reference decodes every prompt there
    at_fp32 = SimpleNamespace(cells={"eng": ("fp32", "sdpa")}, entries={"eng": {}}, file=lambda n: f"{n}.parquet")
    d = DecodePlan(cfg, models, at_fp32)
    assert d.cell_prompts("ar-ref", None, "fp32") == [] and d.files()[-1] == "eng.parquet"


def test_the_analysis_plan_explains_the_decoders_under_audit():
    cfg = checked(DEFAULT, lambda c: c["decode"].update(own_ar_view=True))
    engines = EnginesPlan(cfg)
    decode = DecodePlan(cfg, ModelsPlan(cfg), engines)
    a = AnalysisPlan(cfg, decode, engines)
    assert a.forensics_files() == [f"results/forensics/{m}.parquet" for m in ("ce-k8", "kl-k8", "teacher")]
    # a model's AR view is decoded but not explained: it is a second reference, not under audit
    decoded = a.forensics_decoded(w(model="ce-k8"))
    assert "results/decode/ce-k8/ar-bf16-sdpa.parquet" in decode.files()
    assert decoded and not any("/ar-" in f for f in decoded)
    assert a.forensics_reference(w(model="ce-k8")) == [
        f.replace("ce-k8/orthrus-lossy", "teacher/ar-ref").replace("ce-k8/orthrus", "teacher/ar-ref") for f in decoded
    ]
    assert a.ppl_decoded() == [f"results/decode/teacher/ar-ref-{p}-sdpa.parquet" for p in ("bf16", "fp32")]
    ulps = dict(kv.split("=") for kv in a.rounding_ulps().split(","))
    assert {p: float(v) for p, v in ulps.items()} == cfg.analysis.rounding_ulps.model_dump()


def test_the_benchmarks_plan_runs_the_teachers_baseline_and_each_models_loop():
    cfg = checked(DEFAULT)
    b = BenchmarksPlan(cfg, SimpleNamespace(teacher="t", orthrus=["m"]))
    att = cfg.benchmarks.attention
    assert b.enabled and b.tasks() == "tiny_code,tiny_qa" and b.code_tasks_left_out() == []
    assert b.files() == [f"results/benchmarks/t/ar-bf16-{att}.json", f"results/benchmarks/m/orthrus-bf16-{att}.json"]
    b.bench = b.bench.model_copy(update=dict(ar_baseline="hf", tiny_tasks=[], tasks=["humaneval", "gsm8k"]))
    assert b.files()[0] == f"results/benchmarks/t/ar-ref-bf16-{att}.json"  # lm-eval's own generate: the reference
    assert b.code_tasks_left_out() == ["humaneval"] and b.tasks() == "gsm8k"  # model-written code left out


def test_the_sampling_plan_measures_one_model():
    cfg = checked(DEFAULT)
    s = SamplingPlan(cfg, SimpleNamespace(teacher="t", orthrus=["m1", "m2"]))
    assert s.model() == "m1" and s.engines() == {} and s.engine_runs(None, "vllm") == []
    assert s.tables() == ["results/tables/sampling_tv.csv", "results/tables/sampling_two_sample.csv"]
    assert "results/figures/sampling_tv.png" in s.outputs() and "results/tables/sampling_engines.csv" not in s.outputs()
    assert SamplingPlan(cfg, SimpleNamespace(teacher="t", orthrus=[])).outputs() == []  # no model to measure


def test_the_report_plan_builds_the_tables_only_where_something_is_compared():
    decode = SimpleNamespace(
        models=SimpleNamespace(orthrus=[]), teacher_decoders=[], files=lambda: ["d.parquet"], frontier_files=lambda: []
    )
    engines = SimpleNamespace(entries={})
    r = ReportPlan(decode, engines, SimpleNamespace(enabled=False), SimpleNamespace(outputs=list))
    assert r.final_outputs(["c.parquet"]) == ["c.parquet", "d.parquet"]  # the corpus and the decodings
    engines.entries = {"eng": {}}  # an engine's file is compared with the reference
    out = r.final_outputs(["c.parquet"])
    assert "results/tables/claims.csv" in out and "c.parquet" not in out and "results/tables/benchmarks.csv" not in out
