"""The shipped subject (orthrus/world/subject): intact, reproduced by the world generator, built
with the settings config.yaml states, and refused when a file is damaged or the world changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from orthrus.cli import main as cli
from orthrus.world import subject
from orthrus.world.settings import DEFAULTS
from orthrus.world.teacher import train_teacher, world_fingerprint

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_subject_is_intact_and_the_world_generator_reproduces_it():
    """Fails when a change to orthrus/world alters the text the shipped teacher or draft learned
    from: the subject must then be rebuilt (docs/USAGE.md, "The shipped subject")."""
    assert subject.check(world=True) == []
    m = subject.manifest()
    assert set(m["models"]) == {"teacher", "draft"} and "orthrus subject ship" in m["rebuild"]
    for name in ("teacher", "draft"):
        files = m["models"][name]["files"]
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
        assert not any(f.endswith((".bin", ".pt", ".pkl", ".py")) for f in files)  # no pickles, no code


def test_config_yaml_states_the_settings_the_subject_was_built_with():
    """The rebuild command trains with config.yaml's teacher.tiny / teacher.draft.tiny at seed 0:
    they must be the settings in the manifest, or the rebuilt subject would be another one."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())["teacher"]
    m = subject.manifest()["models"]
    for name, stated in (("teacher", cfg["tiny"]), ("draft", cfg["draft"]["tiny"])):
        built = m[name]["settings"]
        # the rule passes the global seed (0) and the threads; the rest is config.yaml's, over DEFAULTS
        expect = {**DEFAULTS, **stated, "seed": 0}
        assert {k: v for k, v in built.items() if k != "threads"} == {
            k: v for k, v in expect.items() if k != "threads"
        }, name
    assert cfg["source"] == "shipped" and cfg["draft"]["source"] == "shipped"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A teacher and a draft trained for two steps, as the teacher rules build them."""
    root = tmp_path_factory.mktemp("built")
    small = {
        "steps": 2,
        "warmup_steps": 0,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_layers": 1,
        "head_dim": 16,
        "vocab_size": 320,
        "eval_per_domain": 0,
        "batch_size": 2,
    }
    train_teacher(small, root / "teacher", verbose=False)
    train_teacher({**small, "vocab_size": 768}, root / "draft", verbose=False, tokenizer=str(root / "teacher"))
    return root


def test_ship_then_check_and_what_check_refuses(built, tmp_path, capsys):
    dest = tmp_path / "subject"
    assert (
        cli(
            [
                "subject",
                "ship",
                "--teacher",
                str(built / "teacher"),
                "--draft",
                str(built / "draft"),
                "--root",
                str(dest),
            ]
        )
        == 0
    )
    m = subject.manifest(dest)
    assert m["models"]["teacher"]["world_fingerprint"] == world_fingerprint(m["models"]["teacher"]["settings"])
    # the draft learned its teacher's tokenizer: its fingerprint leaves the tokenizer's corpus out
    assert m["models"]["draft"]["world_fingerprint"] == world_fingerprint(m["models"]["draft"]["settings"], False)
    assert m["models"]["draft"]["world_fingerprint"] != world_fingerprint(m["models"]["draft"]["settings"], True)
    assert cli(["subject", "check", "--world", "--root", str(dest)]) == 0
    assert "intact" in capsys.readouterr().out
    # a damaged weight file
    w = dest / "draft" / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 1
    w.write_bytes(bytes(data))
    assert cli(["subject", "check", "--root", str(dest)]) == 1
    assert "draft/model.safetensors: SHA-256 differs" in capsys.readouterr().err
    shutil.copyfile(built / "draft" / "model.safetensors", w)
    (dest / "teacher" / "tokenizer.json").unlink()
    assert any("teacher/tokenizer.json: missing" in p for p in subject.check(dest))
    shutil.copyfile(built / "teacher" / "tokenizer.json", dest / "teacher" / "tokenizer.json")
    assert subject.check(dest) == []
    # a world generator that no longer produces the text the model learned from
    rec = json.loads((dest / subject.MANIFEST).read_text())
    rec["models"]["teacher"]["world_fingerprint"] = "0" * 64
    (dest / subject.MANIFEST).write_text(json.dumps(rec))
    assert subject.check(dest) == []  # the files are intact ...
    problems = subject.check(dest, world=True)  # ... but the world is not the one they learned
    assert len(problems) == 1 and "teacher: the world generator" in problems[0] and subject.REBUILD in problems[0]


def test_the_fingerprint_follows_the_world_text_not_the_model_settings():
    base = {"steps": 8, "warmup_steps": 0, "length_buckets": 4, "batch_size": 4}
    fp = world_fingerprint(base)
    assert fp == world_fingerprint(base)
    assert fp == world_fingerprint({**base, "hidden_size": 512, "lr": 1.0})  # not text: same fingerprint
    assert fp != world_fingerprint({**base, "seed": 1})
    assert fp != world_fingerprint({**base, "steps": 12})  # one more pool of samples
    assert fp != world_fingerprint(base, own_tokenizer=False)


def test_a_ship_of_a_directory_that_is_no_tiny_teacher_is_refused(tmp_path):
    (tmp_path / "t").mkdir()
    with pytest.raises(subject.InputError, match="teacher_config.json"):
        subject.ship(tmp_path / "t", tmp_path / "t", tmp_path / "dest")
