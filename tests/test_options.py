"""The one decoding-options object: its defaults are the only ones, it validates itself, it round-trips
through a decoding row's `env`, and the config builds it for every cell."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orthrus.errors import InputError
from orthrus.options import LOOP_ONLY, DecodeOptions, OptionsError

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())


def test_round_trip_through_json_and_a_rows_env():
    o = DecodeOptions(
        decoder="orthrus",
        precision="bf16",
        attention="sdpa",
        max_new_tokens=7,
        block_size=4,
        message="system:Be brief.",
        eos="config",
        last_block="shorten",
        prefill_logits="all",
        deterministic=False,
        temperature=0.7,
        top_k=5,
        top_p=0.9,
    )
    assert DecodeOptions.from_json(o.to_json()) == o
    env = json.dumps({"dtype": "bf16", "loop": "orthrus.generate", "options": o.record()})
    assert DecodeOptions.from_row(env, "orthrus", "bf16", "sdpa") == o
    with pytest.raises(OptionsError, match="disagree.*precision 'fp32' vs 'bf16'"):
        DecodeOptions.from_row(env, "orthrus", "fp32", "sdpa")


def test_rows_from_before_the_options_object_read_their_protocol_settings():
    legacy = json.dumps({"message": "none", "max_new_tokens": 9, "eos": "config", "dtype": "fp32", "attention": "sdpa"})
    assert DecodeOptions.from_row(legacy, "orthrus", "fp32", "sdpa") == DecodeOptions(
        precision="fp32", attention="sdpa", message="none", max_new_tokens=9, eos="config"
    )
    # transformers' decoders never recorded loop options; a missing or unreadable env: the defaults
    assert DecodeOptions.from_row(legacy, "ar-ref", "fp32", "sdpa") == DecodeOptions(
        decoder="ar-ref", attention="sdpa", message="none", max_new_tokens=9
    )
    assert (
        DecodeOptions.from_row(None, "ar", "bf16", "eager")
        == DecodeOptions.from_row("not json", "ar", "bf16", "eager")
        == DecodeOptions(decoder="ar", precision="bf16")
    )


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"decoder": "beam"}, "decoder"),
        ({"precision": "fp8"}, "precision"),
        ({"attention": "flash"}, "attention"),
        ({"max_new_tokens": 4.0}, "max_new_tokens"),
        ({"max_new_tokens": True}, "max_new_tokens"),
        ({"block_size": 1}, "block_size"),
        ({"message": "user"}, "message"),
        ({"eos": "tokenizer"}, "eos"),
        ({"last_block": "trim"}, "last_block"),
        ({"prefill_logits": "none"}, "prefill_logits"),
        ({"deterministic": "no"}, "deterministic"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0}, "top_p"),
        ({"decoder": "prompt-lookup", "prompt_lookup_tokens": 0}, "prompt_lookup_tokens"),
        ({"decoder": "orthrus", "prompt_lookup_tokens": 4}, "prompt-lookup decoder only"),
        ({"decoder": "ar-ref", "eos": "config"}, "eos apply to this package's loop"),
        ({"decoder": "assisted", "last_block": "shorten", "block_size": 4}, "block_size, last_block apply"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_option(changes, message):
    with pytest.raises(OptionsError, match=message) as err:
        DecodeOptions(**changes)
    assert "\n" not in str(err.value)
    with pytest.raises(OptionsError, match="unknown decoding option"):
        DecodeOptions.from_record({"eos_policy": "config"})


def test_from_config_gives_each_decoder_the_options_that_apply_to_it():
    paper = yaml.safe_load((ROOT / "configs/paper.yaml").read_text())["decode"]
    orth = DecodeOptions.from_config(paper, "orthrus", "bf16", "eager")
    assert (orth.eos, orth.last_block, orth.prefill_logits, orth.deterministic, orth.max_new_tokens) == (
        "config",
        "shorten",
        "all",
        False,
        128,
    )
    for decoder in ("ar-ref", "assisted"):
        hf = DecodeOptions.from_config(paper, decoder, "bf16", "eager")
        assert all(getattr(hf, k) == getattr(DecodeOptions, k) for k in LOOP_ONLY)  # transformers stops as it does
        assert hf.deterministic is False and hf.prompt_lookup_tokens == DecodeOptions.prompt_lookup_tokens
    assert (
        DecodeOptions.from_config(
            {**paper, "prompt_lookup_tokens": 3}, "prompt-lookup", "fp32", "eager"
        ).prompt_lookup_tokens
        == 3
    )
    tpf = yaml.safe_load((ROOT / "configs/paper.yaml").read_text())["tpf"]
    t = DecodeOptions.from_config({**paper, **tpf}, "orthrus", "bf16", "eager")
    assert (t.max_new_tokens, t.message, t.eos) == (256, "none", "config")


def test_the_schema_defaults_are_the_options_defaults():
    decode = SCHEMA["$defs"]["Decode"]["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(DecodeOptions)}
    shared = [k for k in decode if k in fields]
    assert set(shared) >= {
        "max_new_tokens",
        "message",
        "eos",
        "last_block",
        "prefill_logits",
        "deterministic",
        "prompt_lookup_tokens",
    }
    for k in shared:
        assert decode[k]["default"] == fields[k], k
    for k in ("eos", "last_block", "prefill_logits"):
        assert tuple(decode[k]["enum"]) == tuple(
            getattr(
                __import__("orthrus.options", fromlist=["x"]),
                {"eos": "EOS_POLICIES", "last_block": "LAST_BLOCKS", "prefill_logits": "PREFILL_LOGITS"}[k],
            )
        )


def _sources():
    files = [*ROOT.glob("orthrus/**/*.py"), *ROOT.glob("workflow/**/*.smk"), *ROOT.glob("workflow/scripts/*.py")]
    return [f for f in files if f.name != "options.py"]


def test_each_loop_default_is_written_once():
    """No module restates an option's default: no `default=`, keyword default, `.get(key, default)`
    or dict entry with an option's default value outside orthrus/options.py."""
    found = []
    for name in ("message", "eos", "last_block", "prefill_logits"):
        value = re.escape(getattr(DecodeOptions, name))
        patterns = [
            rf'default\s*=\s*"{value}"',
            rf'{name}\s*(:\s*str)?\s*=\s*"{value}"',
            rf'\.get\(\s*"{name}"\s*,\s*"{value}"',
            rf'"{name}"\s*:\s*"{value}"',
            rf'env_setting\([^)]*"{name}"',
        ]
        for f in _sources():
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if any(re.search(p, line) for p in patterns):
                    found.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
    for token in ("DEFAULT_OPTIONS", "DECODE_DEFAULTS", "DEFAULT_PROMPT_LOOKUP_TOKENS", "row_message"):
        assert not [f for f in _sources() if token in f.read_text()], token


def test_light_stages_import_without_torch():
    """The options, the shared helpers and the table and figure stages start without torch."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import orthrus.options, orthrus.models.loading, orthrus.data.prompt_set, orthrus.decode.tpf, orthrus.errors\n"
        "import orthrus.analysis, orthrus.analysis.tpf, orthrus.report.figures, orthrus.report.summary, orthrus.report.compare_tables\n"
        "from orthrus.options import DecodeOptions; DecodeOptions(decoder='ar')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_every_user_error_is_one_line_and_exit_2(tmp_path, capsys):
    from orthrus.cli import main

    assert (
        main(
            [
                "decode",
                "--model-path",
                str(tmp_path / "none"),
                "--model-name",
                "m",
                "--prompts",
                str(tmp_path / "p"),
                "--options",
                '{"decoder": "orthrus", "eos": "sometimes"}',
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("orthrus decode: decoding option eos must be one of") and err.count("\n") == 1
    import pandas as pd

    pd.DataFrame({"prompt_id": ["a"], "domain": ["x"], "prompt": ["hi"]}).to_parquet(tmp_path / "p.parquet")
    assert (
        main(
            [
                "decode",
                "--model-path",
                str(tmp_path / "none"),
                "--model-name",
                "m",
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--decoder",
                "ar",
                "--precision",
                "fp32",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "model path does not exist" in err and "Traceback" not in err and err.count("\n") == 1


def test_a_pinned_hub_id_reaches_the_hub_at_its_revision_and_the_commit_is_recorded(tmp_path, monkeypatch):
    """`owner/name@REV` (what the rules pass for `revisions`) downloads that revision; the snapshot's
    commit is what a decoding row records. Local paths and an `@` in them stay as they are."""
    import huggingface_hub

    from orthrus.models.files import resolve_checkpoint
    from orthrus.models.hub import snapshot_commit, split_revision

    assert split_revision("Qwen/Qwen3-1.7B@0123abc") == ("Qwen/Qwen3-1.7B", "0123abc")
    assert split_revision("Qwen/Qwen3-1.7B") == ("Qwen/Qwen3-1.7B", None)
    assert split_revision("./dir@v1") == ("./dir@v1", None)
    snap = tmp_path / "models--Qwen--Qwen3-1.7B" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"")
    asked = {}

    def fake_download(repo_id, allow_patterns=None, revision=None):
        asked.update(repo_id=repo_id, revision=revision, patterns=allow_patterns)
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    with pytest.raises(InputError):  # the empty weight file is refused, after the download was asked for
        resolve_checkpoint("Qwen/Qwen3-1.7B@0123abc")
    assert asked["repo_id"] == "Qwen/Qwen3-1.7B" and asked["revision"] == "0123abc"
    assert not any(p.endswith((".py", ".bin")) for p in asked["patterns"])
    assert snapshot_commit(snap) == "0123abc" and snapshot_commit(tmp_path) is None


@pytest.mark.slow
def test_revisions_pin_every_hub_artefact_of_the_paper_dag(tmp_path):
    """`revisions` reach the loaders of every stage as ID@REV; a pin for an id the config does not load
    is refused naming it."""
    paper = yaml.safe_load((ROOT / "configs/paper.yaml").read_text())
    paper["revisions"] = {
        "Qwen/Qwen3-1.7B": "aaa111",
        "Qwen/Qwen3-0.6B": "bbb222",
        "ai-forever/ZaryaOrthrusDataset-1.7B": "ccc333",
        "chiennv/Orthrus-Qwen3-1.7B": "ddd444",
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(paper))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n", "-p"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert "--model-path Qwen/Qwen3-1.7B@aaa111" in out and "--draft-path Qwen/Qwen3-0.6B@bbb222" in out
    assert "--dataset ai-forever/ZaryaOrthrusDataset-1.7B@ccc333" in out and "--teacher Qwen/Qwen3-1.7B@aaa111" in out
    assert "--model-path chiennv/Orthrus-Qwen3-1.7B@ddd444" in out
    assert "--model-path ai-forever/ZaryaOrthrus-1.7B " in out  # not pinned: as given
    paper["revisions"] = {"Qwen/Qwen3-8B": "x"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(paper))
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0 and "revisions.Qwen/Qwen3-8B: not a hub id this config loads" in res.stdout + res.stderr


def test_a_killed_atomic_write_leaves_nothing_a_rerun_keeps(tmp_path):
    """The hidden temporary sibling of a write that was killed (SIGKILL skips every cleanup) is
    removed by the next write of the same output, and only that output's."""
    from orthrus.io import atomic_path

    (tmp_path / ".model.abc123.tmp" / "model").mkdir(parents=True)  # what a killed save leaves
    (tmp_path / ".other.abc123.tmp").mkdir()
    with atomic_path(tmp_path / "model") as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
    assert (tmp_path / "model" / "config.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.abc123.tmp", "model"]
