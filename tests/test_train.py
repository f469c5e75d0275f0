"""Distillation of the diffusion view (orthrus.distill) on a micro teacher and a synthetic corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

import orthrus
from orthrus.distill.data import Corpus, make_batch, n_weighted
from orthrus.distill.evaluate import eval_prompt_ids
from orthrus.distill.loss import block_loss
from orthrus.distill.reference import blockwise_loss
from orthrus.distill.settings import DEFAULTS, offset_weights, resolve_settings
from orthrus.distill.student import load_student, lr_lambda
from orthrus.distill.train import main, train
from orthrus.models.modeling import OrthrusForCausalLM

torch.set_num_threads(1)

MICRO = {
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate_size": 64,
    "max_len": 128,
    "seed": 0,
}
# short runs: every step is a few milliseconds
FAST = {
    "block_size": 4,
    "blocks_per_seq": 6,
    "batch_size": 4,
    "max_len": 64,
    "lr": 1e-2,
    "warmup_steps": 2,
    "max_steps": 6,
    "save_every": 0,
    "log_every": 1,
    "eval_per_domain": 2,
    "eval_max_new_tokens": 24,
    "attention": "eager",
}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A micro Qwen3 teacher with the world tokenizer (random weights, bumped scale so greedy
    outputs vary), saved like `orthrus train-teacher` saves it."""
    from transformers import GenerationConfig

    from orthrus.world.teacher import make_model
    from orthrus.world.tokenizer import train_tokenizer

    tok = train_tokenizer(vocab_size=300, n_per_domain=20)
    model = make_model(MICRO, tok)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8.0)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=False
    )
    d = tmp_path_factory.mktemp("teacher") / "teacher"
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def write_corpus(path, n=24, seed=0, vocab=290, eos=2, domains=("math", "qa")):
    g = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        p = g.integers(3, vocab, size=int(g.integers(4, 12))).tolist()
        r = g.integers(3, vocab, size=int(g.integers(8, 30))).tolist() + [eos]
        rows.append({"prompt_id": f"p{i}", "domain": domains[i % len(domains)], "prompt_ids": p, "response_ids": r})
    df = pd.DataFrame(rows)
    df.to_parquet(path, index=False)
    return df


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "shard.parquet"
    write_corpus(path)
    return path


@pytest.fixture(scope="module")
def eval_prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "eval.parquet"
    pd.DataFrame(
        {
            "prompt_id": ["m0", "m1", "q0", "q1"],
            "domain": ["math", "math", "qa", "qa"],
            "prompt": ["Compute 2+3.", "Compute 7*8.", "Who wrote it?", "What is a cat?"],
        }
    ).to_parquet(path)
    return path


# ------------------------------------------------------------------ the single-pass step


@pytest.mark.parametrize("objective,attention", [("ce", "eager"), ("kl", "eager"), ("mix", "sdpa")])
def test_single_pass_equals_one_block_at_a_time(teacher, objective, attention):
    s = resolve_settings({"block_size": 4, "mask_token_id": None, "attention": attention, "objective": objective})
    model, _ = load_student(teacher, s)
    with torch.no_grad():  # make the diffusion view differ from the AR view
        for p in model.diffusion_parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    g = np.random.default_rng(0)
    seqs = [g.integers(3, 290, size=n) for n in (20, 13, 31)]
    # overlapping blocks, a block reaching past the end, sequences with different block counts
    anchors = [np.array([5, 9, 10, 17, 18]), np.array([3, 11]), np.array([4, 20, 29])]
    batch = make_batch(seqs, anchors, 4, offset_weights([1.0, 0.5, 0.25], 4), model.mask_token_id, 0)
    params = model.diffusion_parameters()
    one, st = block_loss(model, batch, objective, 0.3)
    g1 = torch.autograd.grad(one, params)
    ref = blockwise_loss(model, batch, objective, 0.3)
    g2 = torch.autograd.grad(ref, params)
    W = st["weight"]
    assert W == pytest.approx(
        sum(n_weighted(len(x), a, offset_weights([1.0, 0.5, 0.25], 4)) for x, a in zip(seqs, anchors))
    )
    assert abs(one.item() / W - ref.item() / W) < 1e-5
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a / W, b / W, atol=1e-5, rtol=1e-4)


def test_make_batch_mask_targets_and_skips():
    seq = np.arange(10, 22)  # 12 tokens, ids 10..21
    b = make_batch([seq, seq[:6]], [np.array([3, 9]), np.array([4])], 4, offset_weights(None, 4), 99, 0)
    assert b["blocks"].tolist()[0] == [13, 99, 99, 99, 19, 99, 99, 99]
    assert b["pos"].tolist()[0] == [3, 4, 5, 6, 9, 10, 11, 12]
    # slot i predicts a+i+1; slot K-1 has weight 0 by default; targets past the end are skipped
    assert b["targets"][0, :3].tolist() == [14, 15, 16]
    assert b["w"][0].tolist() == [1, 1, 1, 0, 1, 1, 0, 0]
    assert b["w"][1].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]  # second sequence: 6 tokens, one block
    L = 12
    allowed = b["allowed"][0]
    for r in range(8):
        a = 3 if r < 4 else 9
        assert allowed[r, :L].tolist() == [k < a for k in range(L)]
        own = [L + k for k in range(8) if k // 4 == r // 4]
        assert allowed[r, L:].nonzero().flatten().add(L).tolist() == own


# ------------------------------------------------------------------ settings and bad input


def test_settings_validation():
    with pytest.raises(ValueError, match=r"unknown training settings: \['bogus', 'lr_typo'\]"):
        resolve_settings({"bogus": 1, "lr_typo": 2})
    for bad, msg in [
        ({"objective": "mse"}, "objective: Input should be 'ce', 'kl' or 'mix'"),
        ({"block_size": 1}, "block_size"),
        ({"blocks_per_seq": 0}, "blocks_per_seq"),
        ({"offset_weights": [1, 2]}, "offset_weights"),
        ({"block_size": 4, "min_loss_tokens": 4}, "min_loss_tokens"),
        ({"kl_weight": 2}, "kl_weight"),
        ({"max_steps": 0}, "max_steps"),
        # issue 35: settings that would train nothing
        ({"block_size": 8, "max_len": 8}, r"block_size: 8 is not below max_len \(8\)"),
        ({"warmup_steps": 6, "max_steps": 6}, r"warmup_steps: 6 is not below max_steps \(6\)"),
        ({"lr": 1e6}, "lr: Input should be less than or equal to 1"),
        ({"seed": -1}, "seed: Input should be greater than or equal to 0"),
        ({"seed": 2**64}, "seed: Input should be less than or equal to 18446744073709551615"),
        ({"block_size": 4, "offset_weights": [0, 0, 0]}, "not all zero"),
    ]:
        with pytest.raises(ValueError, match=msg):
            resolve_settings(bad)
    assert resolve_settings({"seed": 2**64 - 1, "lr": 1.0}).seed == 2**64 - 1  # huge but legal: accepted
    s = resolve_settings({"block_size": 4, "offset_weights": [1, 1, 1, 1]})
    assert offset_weights(s.offset_weights, 4).tolist() == [1, 1, 1, 1]
    for bad, msg in [({"schedule": "linear"}, "schedule: Input should be"), ({"mask_token": ""}, "mask_token")]:
        with pytest.raises(ValueError, match=msg):
            resolve_settings(bad)


def test_settings_types_follow_the_schema():
    """Values the config schema rejects are rejected by a direct `orthrus train` too, each named
    (rather than failing later inside float() or the optimizer)."""
    for bad, msg in [
        ({"lr": "fast"}, "lr: 'fast' is not of type 'number'"),
        ({"lr": None}, "lr: None is not of type 'number'"),
        ({"kl_weight": "0.5"}, "kl_weight: '0.5' is not of type 'number'"),
        ({"grad_clip": -1}, "grad_clip: Input should be greater than or equal to 0"),
        ({"weight_decay": -0.1}, "weight_decay: Input should be greater than or equal to 0"),
        ({"bf16": "yes"}, "bf16: 'yes' is not of type 'boolean'"),
        ({"betas": [0.9, "x"]}, r"betas\[1\]: 'x' is not of type 'number'"),
        ({"offset_weights": 3}, "offset_weights: 3 is not of type"),
        ({"seed": 1.5}, "seed: 1.5 is not of type 'integer'"),
        ({"description": 7}, "description: 7 is not of type 'string'"),
    ]:
        with pytest.raises(ValueError, match=msg):
            resolve_settings(bad)
    s = resolve_settings({"betas": [0, 0], "grad_clip": None})  # a beta is below 1, as the config says
    assert s.as_dict()["betas"] == [0.0, 0.0] and isinstance(s.as_dict()["betas"][0], float)
    assert list(s.as_dict()) == list(DEFAULTS) and "eval_every" not in s.training_dict()


def test_authors_recipe_constant_schedule_and_named_mask_token(teacher):
    """The authors' recipe: constant lr without warmup (their script has no scheduler), and a
    dedicated mask token named <|orthrus_mask|>."""
    cos = lr_lambda(resolve_settings({"warmup_steps": 2}), total=10)
    const = lr_lambda(resolve_settings({"warmup_steps": 0, "schedule": "constant"}), total=10)
    assert [const(i) for i in range(10)] == [1.0] * 10
    assert cos(0) == 0.5 and cos(2) == 1.0 and cos(9) < 0.2
    s = resolve_settings({"block_size": 4, "mask_token": "<|orthrus_mask|>"})
    model, tok = load_student(teacher, s)
    assert tok.convert_ids_to_tokens(model.mask_token_id) == "<|orthrus_mask|>"
    assert model.mask_token_id == len(tok) - 1


def test_bad_corpus_fails_before_training_or_is_counted(tmp_path, teacher):
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"prompt_ids": [[1, 2]], "text": ["x"]}).to_parquet(bad)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['response_ids'\]"):
        train(FAST, teacher, [bad], tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="not found"):
        train(FAST, teacher, [tmp_path / "nope.parquet"], tmp_path / "out")
    mixed = tmp_path / "mixed.parquet"
    pd.DataFrame(
        {
            "prompt_ids": [[5] * 4, [5] * 4, [5] * 4, [5] * 70, [5] * 10],
            "response_ids": [[], [7], [7] * 3, [7] * 5, [7] * 100],
        }
    ).to_parquet(mixed)
    s = resolve_settings({**FAST, "min_loss_tokens": 2})
    c = Corpus([mixed], s, verbose=False)
    assert c.counts == {
        "rows": 5,
        "used": 2,
        "truncated": 1,
        "skipped_error": 0,
        "skipped_empty_response": 1,
        "skipped_short_response": 1,
        "skipped_prompt_over_max_len": 1,
    }
    assert max(len(x) for x in c.ids) == 64
    # anchors stay inside the response and leave room for min_loss_tokens targets
    for i in range(len(c)):
        a = c.anchors(i, 0, s)
        assert a.min() >= c.prompt_len[i] and a.max() <= len(c.ids[i]) - 3
    with pytest.raises(ValueError, match="fewer than one global batch"):
        train({**FAST, "batch_size": 3}, teacher, [mixed], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # 2 usable sequences in batches of 2, one epoch: 1 step, inside the warm-up of 2 (what the plan could not know)
    with pytest.raises(ValueError, match="warmup_steps 2 is not below the run's 1 optimizer steps"):
        train({**FAST, "batch_size": 2, "max_steps": None, "epochs": 1}, teacher, [mixed], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_rejects_unknown_keys_and_missing_model(tmp_path, teacher, corpus, capsys):
    from orthrus.cli import main as orthrus_cli

    def main(argv):  # as `orthrus train` runs: a user error is one line and exit 2
        return orthrus_cli(["train", *argv])

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("models:\n  a:\n    block_size: 4\n    typo_key: 3\n")
    args = ["--teacher", str(teacher), "--corpus", str(corpus), "--config", str(cfg), "--out", str(tmp_path / "o")]
    assert main(args + ["--model", "a"]) == 2
    assert "typo_key" in capsys.readouterr().err
    assert main(args + ["--model", "zzz"]) == 2
    assert "no model 'zzz'" in capsys.readouterr().err
    # the settings themselves, inline as the workflow passes them, or a file
    common = ["--teacher", str(teacher), "--corpus", str(corpus), "--out", str(tmp_path / "o")]
    assert main(common + ["--config", '{"block_size": 4, "typo_key": 3}']) == 2
    assert "unknown training settings: ['typo_key']" in capsys.readouterr().err
    assert main(common + ["--config", str(cfg)]) == 2  # a full config names its variant
    assert "name the variant with --model NAME" in capsys.readouterr().err
    assert main(common + ["--model", "a"]) == 2
    assert "--model needs --config" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ end to end


def test_train_end_to_end_backbone_frozen_and_exact_decoding(tmp_path, teacher, corpus, eval_prompts):
    from transformers import Qwen3ForCausalLM

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("models:\n  tiny:\n" + "".join(f"    {k}: {json.dumps(v)}\n" for k, v in FAST.items()))
    out = tmp_path / "model"
    assert (
        main(
            [
                "--teacher",
                str(teacher),
                "--corpus",
                str(corpus),
                "--config",
                str(cfg),
                "--model",
                "tiny",
                "--out",
                str(out),
                "--threads",
                "1",
                "--eval-prompts",
                str(eval_prompts),
                "--no-progress",
            ]
        )
        == 0
    )
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "train_log.csv",
        "train_log.jsonl",
        "eval_log.csv",
        "train_summary.json",
    } <= names
    assert not out.with_name("model.ckpt").exists()
    log = pd.read_csv(out / "train_log.csv")
    assert list(log.columns[:5]) == ["step", "loss", "lr", "tokens", "seconds"]
    assert log["step"].tolist() == list(range(1, 7)) and log["tokens"].is_monotonic_increasing
    assert np.isfinite(log["loss"]).all() and (log["lr"] > 0).all()
    ev = pd.read_csv(out / "eval_log.csv")
    assert set(ev["domain"]) == {"math", "qa", "all"} and (ev["tpf_verify"] >= 1).all()
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 6 and summary["counts"]["used"] == 24 and summary["settings"]["block_size"] == 4

    model = OrthrusForCausalLM.from_pretrained(out)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)  # the dedicated mask token was added and saved
    assert model.block_size == 4 and model.mask_token_id == tok.convert_tokens_to_ids("<|mask|>") == len(tok) - 1
    # the backbone is bit-identical to the teacher's (the unused mask row was set by from_base)
    base = Qwen3ForCausalLM.from_pretrained(teacher).state_dict()
    mine = model.state_dict()
    mask = model.mask_token_id
    for k, v in base.items():
        if k in ("model.embed_tokens.weight", "lm_head.weight"):
            keep = torch.arange(v.shape[0]) != mask
            assert torch.equal(v[keep], mine[k][keep]), k
        else:
            assert torch.equal(v, mine[k]), k
    fresh, _ = load_student(teacher, resolve_settings(FAST))
    ref = fresh.state_dict()
    changed = [k for k in ref if OrthrusForCausalLM.is_diffusion_parameter(k) and not torch.equal(ref[k], mine[k])]
    assert changed and all(
        torch.equal(ref[k], mine[k]) for k in ref if not OrthrusForCausalLM.is_diffusion_parameter(k)
    )
    # fp32 Orthrus decoding of the trained model is exactly its AR view's
    for _, ids in eval_prompt_ids(eval_prompts, fresh.tokenizer, 2):
        ids = torch.tensor(ids)
        ar = orthrus.generate(model, ids, decoder="ar", max_new_tokens=40)
        orth = orthrus.generate(model, ids, decoder="orthrus", max_new_tokens=40)
        assert torch.equal(ar.tokens, orth.tokens)


def test_killed_run_resumes_to_the_same_weights(tmp_path, teacher, corpus):
    s = {**FAST, "max_steps": 7, "save_every": 2, "eval_per_domain": 0, "objective": "mix", "mask_token_id": 280}
    train(s, teacher, [corpus], tmp_path / "a", progress=False)

    class Killed(Exception):
        pass

    def kill(step, row):
        if step == 5:
            raise Killed

    with pytest.raises(Killed):
        train(s, teacher, [corpus], tmp_path / "b", progress=False, on_step=kill)
    assert not (tmp_path / "b").exists()
    assert {p.name for p in (tmp_path / "b.ckpt" / "last").iterdir()} == {"tensors.safetensors", "state.json"}
    assert json.loads((tmp_path / "b.ckpt" / "last" / "state.json").read_text())["step"] == 4
    train(s, teacher, [corpus], tmp_path / "b", progress=False)
    wa, wb = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    la, lb = pd.read_csv(tmp_path / "a" / "train_log.csv"), pd.read_csv(tmp_path / "b" / "train_log.csv")
    pd.testing.assert_series_equal(la["loss"], lb["loss"])
    assert not (tmp_path / "b.ckpt").exists()


def test_checkpoint_round_trip_without_pickle(tmp_path):
    from orthrus.models import checkpoint

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    obj = {
        "optimizer": opt.state_dict(),
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": __import__("random").getstate(),
            "cuda": None,
        },
        "state": {"log": [{"loss": 0.1 + 0.2, "grad_norm": float("nan")}], "step": 3},
    }
    checkpoint.save(tmp_path / "ck", obj)
    back = checkpoint.load(tmp_path / "ck")
    assert sorted(back["optimizer"]["state"]) == [0, 1]  # parameter indices stay integers
    assert torch.equal(back["optimizer"]["state"][0]["exp_avg"], obj["optimizer"]["state"][0]["exp_avg"])
    assert torch.equal(back["rng"]["torch"], obj["rng"]["torch"]) and back["rng"]["python"] == obj["rng"]["python"]
    assert back["rng"]["numpy"][0] == "MT19937" and np.array_equal(back["rng"]["numpy"][1], obj["rng"]["numpy"][1])
    assert back["state"]["log"][0]["loss"] == 0.1 + 0.2 and back["state"]["step"] == 3
    opt.load_state_dict(back["optimizer"])


def test_changed_teacher_weights_at_the_same_path_start_afresh(tmp_path, teacher, corpus, capsys):
    import shutil

    from safetensors.torch import save_file

    from orthrus.models.checkpoint import file_digest, record_model_digests

    t = tmp_path / "teacher"
    shutil.copytree(teacher, t)
    record_model_digests(t)
    s = {**FAST, "max_steps": 5, "save_every": 2, "eval_per_domain": 0}

    def kill(step, row):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(s, t, [corpus], tmp_path / "m", progress=False, on_step=kill)
    weights = load_file(t / "model.safetensors")
    before = file_digest(t / "model.safetensors")
    save_file({k: v * 1.01 for k, v in weights.items()}, t / "model.safetensors")  # same size, same path
    assert file_digest(t / "model.safetensors") != before  # the stale record beside it is not trusted
    capsys.readouterr()
    train(s, t, [corpus], tmp_path / "m", progress=False)
    err = capsys.readouterr().err
    assert "fresh start" in err and "changed: teacher" in err and "resumed" not in err


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path, teacher, corpus):
    s = {**FAST, "max_steps": 4, "batch_size": 2, "eval_per_domain": 0}
    train({**s, "grad_accum": 2}, teacher, [corpus], tmp_path / "one", progress=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(orthrus.__file__).parents[1])}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "orthrus.cli",
        "train",
        "--teacher",
        str(teacher),
        "--corpus",
        str(corpus),
        "--config",
        json.dumps(s),
        "--out",
        str(tmp_path / "two"),
        "--threads",
        "1",
        "--no-progress",
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    one, two = pd.read_csv(tmp_path / "one" / "train_log.csv"), pd.read_csv(tmp_path / "two" / "train_log.csv")
    assert json.loads((tmp_path / "two" / "train_summary.json").read_text())["world_size"] == 2
    assert one["tokens"].tolist() == two["tokens"].tolist()
    np.testing.assert_allclose(one["loss"], two["loss"], rtol=1e-5)
    w1, w2 = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4)
