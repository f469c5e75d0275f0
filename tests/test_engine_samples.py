"""Engines' sampled files (sampling.engines, issue 34 item 5): the sampled export out, N samples per prompt
back, and the two-sample test on an engine pair; its level, its power, and what it refuses."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import EOS, save_tiny, study, tiny_base

from orthrus.cli import main as cli
from orthrus.engines.engine_samples import engine_table, read_export
from orthrus.engines.ingest import ExternalFileError
from orthrus.options import DecodeOptions

TWO_SAMPLE = {
    "enabled": True,
    "precision": "fp32",
    "temperature": 0.7,
    "top_p": None,
    "n_samples": 200,
    "m": 3,
    "prompts_per_domain": 1,
    "domains": None,
    "alpha": 0.05,
}
PROMPTS = {"p0": ("d0", "w5 w6 w7"), "p1": ("d0", "w9 w3"), "p2": ("d1", "w11 w12 w13 w14"), "p3": ("d1", "w20")}
VOCAB = 64


def _export_records(n=200, m=3, pids=("p0", "p2")):
    return {
        p: {
            "prompt_id": p,
            "domain": f"d{i}",
            "temperature": 0.7,
            "top_p": None,
            "top_k": None,
            "n_samples": n,
            "max_new_tokens": m,
            "stop_token_ids": [EOS],
        }
        for i, p in enumerate(pids)
    }


def _sampled_file(path, export, probs, seed, env=None):
    """A sampled file whose every token is drawn i.i.d. from `probs` over tokens 10.. (no stops)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for rank, (pid, e) in enumerate(export.items()):
            samples = (10 + rng.choice(len(probs), size=(e["n_samples"], e["max_new_tokens"]), p=probs)).tolist()
            rec_env = {"engine": "fake", "seed": seed + rank, "temperature": 0.7, "top_p": None, "top_k": None}
            f.write(json.dumps({"prompt_id": pid, "samples": samples, "env": rec_env | (env or {})}) + "\n")
    return str(path)


def _table(tmp_path, spec_probs, spec_seed=1, ref_seed=100):
    export = _export_records()
    files = {
        "plain": _sampled_file(tmp_path / "plain.jsonl", export, [0.5, 0.3, 0.2], ref_seed),
        "spec": _sampled_file(tmp_path / "spec.jsonl", export, spec_probs, spec_seed),
    }
    entries = {"plain": {"path": files["plain"]}, "spec": {"path": files["spec"], "reference": "plain"}}
    return engine_table(entries, export, VOCAB, 0.05)


def test_the_pair_test_holds_its_level_and_has_power_on_a_biased_engine(tmp_path):
    same = _table(tmp_path, [0.5, 0.3, 0.2])
    assert list(same["prompt_id"]) == ["p0", "p2"] and set(same["engine"]) == {"spec"}
    assert (same["p_value"] > 0.05).all() and not same["rejected"].any()
    biased = _table(tmp_path, [0.2, 0.3, 0.5])  # a sampler off by 0.3 in TV at every token
    assert (biased["p_value"] < 1e-3).all() and biased["rejected"].all() and (biased["n_rejected"] == 2).all()
    assert (biased["engine_seed"] != biased["reference_seed"]).all()


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _good(pid="p0", n=4, seed=1):
    return {
        "prompt_id": pid,
        "samples": [[11, 12, 13]] * (n - 1) + [[11, EOS]],
        "env": {"engine": "fake", "seed": seed, "temperature": 0.7, "top_p": None, "top_k": None},
    }


def _bad(**change):
    rec = _good()
    for k, v in change.items():
        if k in ("seed", "temperature", "top_p", "engine"):
            rec["env"] = {**rec["env"], k: v} if v != "DROP" else {x: y for x, y in rec["env"].items() if x != k}
        else:
            rec[k] = v
    return rec


@pytest.mark.parametrize(
    "rec, message",
    [
        (_bad(samples=[[11, 12, 13]] * 3), "must be a list of 4 samples"),
        (_bad(samples=[[11, 12, 13, 14]] * 4), "more than the export's 3"),
        (_bad(samples=[[11, 12]] * 4), "no stop id: fewer than the export's 3"),
        (_bad(samples=[[EOS, 12, 13]] * 4), "goes on after the stop id"),
        (_bad(samples=[[11, 12, VOCAB]] * 4), "outside the tokenizer's vocabulary"),
        (_bad(seed="DROP"), "key 'seed' missing"),
        (_bad(temperature=1.0), "temperature 1.0, but the sampled export asks 0.7"),
        (_bad(prompt_id="p9"), "'p9' is not a prompt of the sampled export"),
        (_bad(token_ids=[1]), "field 'token_ids': unknown field"),
    ],
)
def test_a_bad_sampled_record_fails_naming_the_file_the_line_and_the_field(tmp_path, rec, message):
    export = _export_records(n=4, pids=("p0",))
    f = _write(tmp_path / "bad.jsonl", [rec])
    good = _write(tmp_path / "good.jsonl", [_good(seed=7)])
    entries = {"plain": {"path": good}, "spec": {"path": f, "reference": "plain"}}
    with pytest.raises(ExternalFileError, match=message) as e:
        engine_table(entries, export, VOCAB, 0.05)
    assert str(e.value).startswith(f"{f}:1: ")


def test_a_missing_prompt_and_a_shared_seed_are_refused(tmp_path):
    export = _export_records(n=4, pids=("p0", "p2"))
    plain = _write(tmp_path / "plain.jsonl", [_good("p0", seed=5), _good("p2", seed=6)])
    short = _write(tmp_path / "short.jsonl", [_good("p0")])
    with pytest.raises(ExternalFileError, match="prompt 'p2' of the sampled export has no record"):
        engine_table({"a": {"path": plain}, "b": {"path": short, "reference": "a"}}, export, VOCAB, 0.05)
    twin = _write(tmp_path / "twin.jsonl", [_good("p0", seed=9), _good("p2", seed=6)])
    with pytest.raises(ExternalFileError, match="prompt 'p2' was sampled with env.seed 6 .* independently"):
        engine_table({"a": {"path": plain}, "b": {"path": twin, "reference": "a"}}, export, VOCAB, 0.05)


def problems(cfg: dict) -> list[str]:
    """The config's problems with `cfg` laid on a minimal study (the tiny teacher's defaults)."""
    from orthrus.errors import ConfigError
    from orthrus.plan.study_config import load

    try:
        load(values={"teacher": {}, "prompts": {}, "corpus": {}, "decode": {}} | cfg)
    except ConfigError as e:
        return e.problems
    return []


def test_the_config_refuses_engines_that_would_test_nothing():
    def config(engines, enabled=True):
        return {"sampling": {"enabled": False, "two_sample": {"enabled": enabled}, "engines": engines}}

    pair = {"a": {"path": "a.jsonl"}, "b": {"path": "b.jsonl", "reference": "a"}}
    assert problems(config(pair)) == []
    assert problems(config({})) == []
    assert any("no entry has a reference" in p for p in problems(config({"a": {"path": "a.jsonl"}})))
    assert any("'c' is not an entry" in p for p in problems(config({**pair, "d": {"path": "d", "reference": "c"}})))
    chained = {**pair, "c": {"path": "c.jsonl", "reference": "b"}}
    assert any("sampling.engines.c.reference: 'b' must be a plain run" in p for p in problems(config(chained)))
    assert any("sampling.engines.a.seed" in p for p in problems(config({**pair, "a": {"path": "a", "seed": 3}})))
    assert any("it is disabled" in p for p in problems(config(pair, enabled=False)))


@pytest.mark.slow
def test_the_stand_in_samples_the_sampled_export_and_its_pair_passes(tmp_path):
    """End to end on a tiny teacher: the sampled export holds the two-sample prompts with their settings;
    the stand-in samples them plain (one batch) and with prompt lookup (one at a time); both sample the
    teacher's distribution, so the pair's test does not reject, and a planted sampler at another
    temperature (its env claiming the export's) is rejected."""
    model = tiny_base(0)
    model.generation_config.eos_token_id = [EOS]
    prompts = save_tiny(tmp_path, {"teacher": model}, PROMPTS, prompts_file="eval.parquet")
    teacher = tmp_path / "teacher"
    export = tmp_path / "sampled.jsonl"
    options = DecodeOptions(decoder="external", precision="fp32", attention="sdpa", max_new_tokens=12)
    args = ["--model-path", str(teacher), "--prompts", str(prompts), "--options", options.to_json()]
    assert cli(["export-prompts", *args, "--sampling", json.dumps(TWO_SAMPLE), "--out", str(export)]) == 0
    exported = read_export(export)
    assert list(exported) == ["p0", "p2"]  # the first prompt of each domain
    assert {(e["max_new_tokens"], e["n_samples"], e["temperature"]) for e in exported.values()} == {(3, 200, 0.7)}

    def sample(decoder, seed, at=None):
        out = tmp_path / f"{decoder}-{seed}.jsonl"
        opts = DecodeOptions(decoder=decoder, precision="fp32", attention="sdpa", max_new_tokens=12)
        src = export
        if at is not None:  # the planted sampler: the export's prompts sampled at another temperature
            src = tmp_path / "hot.jsonl"
            src.write_text("".join(json.dumps(e | {"temperature": at}) + "\n" for e in exported.values()))
        run = {"name": decoder, "out": str(out), "options": opts.to_json(), "device": "cpu", "seed": seed}
        cmd = ["engine-run", "--engine", "transformers", "--model-path", str(teacher), "--prompts", str(src)]
        assert cli([*cmd, "--runs", json.dumps([run])]) == 0
        if at is not None:  # its env says the export's temperature, as a buggy engine's would
            recs = [json.loads(line) for line in out.read_text().splitlines()]
            out.write_text("".join(json.dumps(r | {"env": r["env"] | {"temperature": 0.7}}) + "\n" for r in recs))
        return str(out)

    files = {"plain": sample("ar-ref", 0), "pld": sample("prompt-lookup", 1000), "hot": sample("ar-ref", 2000, at=2.0)}
    recs = [json.loads(line) for line in open(files["pld"])]
    assert [len(r["samples"]) for r in recs] == [200, 200] and recs[0]["env"]["seed"] == 1000
    assert all(len(s) == 3 or s[-1] == EOS for r in recs for s in r["samples"])
    entries = {
        "plain": {"path": files["plain"]},
        "pld": {"path": files["pld"], "reference": "plain"},
        "hot": {"path": files["hot"], "reference": "plain"},
    }
    out = tmp_path / "sampling_engines.csv"
    cmd = ["engine-samples", "--export", str(export), "--model-path", str(teacher), "--entries", json.dumps(entries)]
    assert cli([*cmd, "--out", str(out)]) == 0
    table = pd.read_csv(out)
    pld, hot = table[table["engine"] == "pld"], table[table["engine"] == "hot"]
    assert len(pld) == 2 and not pld["rejected"].any() and (pld["p_value"] > 0.05).all()
    assert hot["rejected"].all() and (hot["p_value"] < 1e-3).all()


def test_an_engine_entry_is_checked_and_becomes_a_recipe_run(monkeypatch):
    """sampling.engines entries with `engine`: their settings only with it, a draft where one proposes,
    the engine's environment named by key; the plan gives each its own seed and the study's patches."""
    import sys

    from orthrus.engines import runner

    monkeypatch.delenv(runner.PYTHON_ENV, raising=False)
    base = {
        "sampling": {"enabled": False, "seed": 1, "two_sample": {"enabled": True, "precision": "fp32"}},
        "engines": {"vllm_python": sys.executable},
        "teacher": {},
    }

    def config(engines, python=sys.executable):
        return base | {"sampling": base["sampling"] | {"engines": engines}, "engines": {"vllm_python": python}}

    plain = {"path": "p.jsonl", "engine": "vllm"}
    monkeypatch.setattr(runner.VLLM_ENGINE, "python_problem", lambda python, users: None)
    spec = {"path": "s.jsonl", "engine": "vllm", "speculative": "ngram", "reference": "p"}
    assert problems(config({"p": plain, "s": spec})) == []
    bad = {
        "s": {"path": "s.jsonl", "speculative": "ngram", "patches": ["cpu-expand-float"], "reference": "p"},
        "t": {"path": "t.jsonl", "engine": "vllm", "stand_in": "ar-ref", "reference": "p"},
        "u": {"path": "u.jsonl", "engine": "vllm", "speculative": "draft_model", "reference": "p"},
    }
    # the section's own rules first; what the engine says of an entry once the section holds
    found = problems(config({"p": plain, **bad})) + problems(config({"p": plain, "u": bad["u"]}))
    for line in (
        "sampling.engines.s.speculative: set without engine",
        "sampling.engines.s.patches: set without engine",
        "sampling.engines.t: stand_in and engine both write its file",
        "sampling.engines.u.draft: speculative draft_model needs a draft: set it, or teacher.draft",
    ):
        assert any(p.startswith(line) for p in found), (line, found)
    monkeypatch.undo()
    monkeypatch.delenv(runner.PYTHON_ENV, raising=False)
    [line] = problems(config({"p": plain, "s": spec}, python=None))
    assert line.startswith("engines.vllm_python: not set") and "needed by sampling.engines.p and 1 more" in line


def test_the_plan_gives_each_sampled_engine_run_its_seed_and_patches(monkeypatch):
    from types import SimpleNamespace

    from orthrus.engines.runner import VLLM_ENGINE
    from orthrus.plan.sampling_plan import SamplingPlan

    engines = {
        "p": {"path": "r/p.jsonl", "engine": "vllm"},
        "t": {"path": "r/t.jsonl", "stand_in": "ar-ref", "reference": "p"},
        "s": {"path": "r/s.jsonl", "engine": "vllm", "speculative": "ngram", "k": 3, "reference": "p", "seed": 77},
        "f": {
            "path": "r/f.jsonl",
            "engine": "vllm",
            "speculative": "ngram",
            "patches": ["cpu-expand-float"],
            "reference": "p",
        },
    }
    sampling = {"seed": 5, "two_sample": {"precision": "bf16"}, "engines": engines}
    # the sampled side runs' plan, given the config and the one model name it reads (vLLM taken as built)
    monkeypatch.setattr(VLLM_ENGINE, "python_problem", lambda python, users: None)
    s = SamplingPlan(study({"sampling": sampling}), SimpleNamespace(teacher="teacher"))
    runs = {r["name"]: r for r in s.engine_runs(None, "vllm")}
    [standin] = s.engine_runs(None, "transformers")  # the stand_in entry is the transformers engine's
    assert list(runs) == ["p", "s", "f"] and (standin["name"], standin["seed"]) == ("t", 1005)
    assert json.loads(standin["options"])["decoder"] == "ar-ref" and standin["out"] == "r/t.jsonl"
    assert [runs[n]["seed"] for n in ("p", "s", "f")] == [5, 77, 3005]
    assert {r["dtype"] for r in runs.values()} == {"bf16"} and runs["f"]["patches"] == ["cpu-expand-float"]
    assert runs["s"]["out"] == "r/s.jsonl" and runs["s"]["k"] == 3 and runs["p"]["speculative"] == "none"
