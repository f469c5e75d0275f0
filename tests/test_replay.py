"""`orthrus replay`: a divergence of a run, rebuilt from its decoding files and models, exactly.

The run here is a miniature of the study's layout (results/teacher, results/models/M,
results/prompts/eval.parquet, results/decode/...), decoded by the decode stage itself from the
run's directory with relative paths, as the workflow does; the models are the tests' tiny ones.
The planted lossy loop parts from the reference by construction; the honest loop's verify blocks
part from single steps by a planted kernel difference (conftest's `verify_kernel_noise`), so both
replays run on any CPU, whatever its bf16 sdpa kernels do."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from helpers import MASK, save_tiny, teacher_and_orthrus, word_tokenizer

from orthrus.cli import main as cli
from orthrus.decode.stage import main as decode
from orthrus.stats import first_divergence


def _run(root):
    """A results/ directory: teacher, one Orthrus model (the teacher's AR view plus a noisy copy as
    its diffusion view), 40 prompts, the reference and Orthrus decoded in bf16 with sdpa."""
    fast = word_tokenizer(MASK + 1)
    base, model = teacher_and_orthrus(0, "sdpa", shift=0.2, shift_seed=7, block_size=8, noise=1e-2, noise_seed=1000)
    res = root / "results"
    g = torch.Generator().manual_seed(4)
    prompts = {
        f"p{i:02d}": ("x", " ".join(f"w{int(i)}" for i in torch.randint(2, 90, (6,), generator=g))) for i in range(40)
    }
    save_tiny(res, {"teacher": base, "models/m": model}, prompts, tokenizer=fast, prompts_file="prompts/eval.parquet")
    common = [
        "--prompts",
        "results/prompts/eval.parquet",
        "--precision",
        "bf16",
        "--attention",
        "sdpa",
        "--max-new-tokens",
        "40",
        "--no-progress",
    ]
    assert (
        decode(
            [
                "--decoder",
                "ar-ref",
                "--model-path",
                "results/teacher",
                "--model-name",
                "teacher",
                *common,
                "--out",
                "results/decode/teacher/ar-ref-bf16-sdpa.parquet",
            ]
        )
        == 0
    )
    out = {}
    for decoder in ("orthrus", "orthrus-lossy"):
        assert (
            decode(
                [
                    "--decoder",
                    decoder,
                    "--model-path",
                    "results/models/m",
                    "--model-name",
                    "m",
                    *common,
                    "--out",
                    f"results/decode/m/{decoder}-bf16-sdpa.parquet",
                ]
            )
            == 0
        )
        out[decoder] = pd.read_parquet(res / f"decode/m/{decoder}-bf16-sdpa.parquet").set_index("prompt_id")["tokens"]
    ref = pd.read_parquet(res / "decode/teacher/ar-ref-bf16-sdpa.parquet").set_index("prompt_id")["tokens"]
    return res, ref, out


@pytest.mark.parametrize("decoder", [pytest.param("orthrus-lossy", marks=pytest.mark.slow), "orthrus"])
def test_replay_reproduces_a_divergence_exactly(tmp_path, monkeypatch, capsys, verify_kernel_noise, decoder):
    """The planted lossy loop parts by construction; the honest loop parts where the verify block's
    bits differ from the single steps' (planted too, `verify_kernel_noise`, so on any CPU)."""
    monkeypatch.chdir(tmp_path)
    res, ref, decoded = _run(tmp_path)
    orth = decoded[decoder]
    diverging = [
        p
        for p in ref.index
        if first_divergence(list(ref[p]), list(orth[p])) is not None
        and first_divergence(list(ref[p]), list(orth[p])) < min(len(ref[p]), len(orth[p]))
    ]
    assert diverging, f"no bf16 divergence of {decoder} to replay"
    pid = diverging[0]
    t = first_divergence(list(ref[pid]), list(orth[pid]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the model paths the rows record are the run directory's
    out = tmp_path / "replay.json"
    argv = [
        "replay",
        str(res),
        "--model",
        "m",
        "--decoder",
        decoder,
        "--precision",
        "bf16",
        "--attention",
        "sdpa",
        "--prompt-id",
        pid,
        "--top-k",
        "5",
        "--out",
        str(out),
    ]
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert f"m/{decoder}/bf16/sdpa {pid}: diverges from the reference at token {t}" in printed
    rec = json.loads(out.read_text())
    assert rec["reproduced"] == {"decoder": True, "reference": True, "all": True}
    assert rec["tokens"]["recorded"]["decoder"] == rec["tokens"]["replayed"]["decoder"] == [int(x) for x in orth[pid]]
    assert (
        rec["tokens"]["recorded"]["reference"] == rec["tokens"]["replayed"]["reference"] == [int(x) for x in ref[pid]]
    )
    d = rec["divergence"]
    assert d["position"] == t and d["reference_token"] == ref[pid][t] and d["decoder_token"] == orth[pid][t]
    f = rec["forwards"]
    # the reference's step picks the reference's token, the verify row Orthrus's: the divergence, rebuilt
    assert (
        f["reference"]["argmax"] == d["reference_token"] and f["reference"]["top_k"][0]["token"] == d["reference_token"]
    )
    assert f["decoder"]["replayed_prefix_matches"]
    # the honest loop's verify row picks its own token; the planted one emits a token its row did not pick
    assert (f["decoder"]["argmax"] == d["decoder_token"]) == (decoder == "orthrus")
    assert len(f["reference"]["top_k"]) == 5 and rec["margin"] == f["reference"]["margin"] >= 0
    assert f["reference"]["logit_other_token"] <= f["reference"]["logit_own_token"]
    assert len(rec["max_abs_hidden_diff"]) == 3
    # the first differing layer is the first with a nonzero difference (none where the kernels kept
    # the hidden states' bits, and the planted difference parted the logits alone)
    layers = rec["max_abs_hidden_diff"]
    assert rec["first_layer_diverging"] == next((i for i, d in enumerate(layers) if d > 0), None)
    if decoder == "orthrus":  # an honest loop emits its own pass's argmax; the bits parted somewhere
        assert rec["verdict"]["verdict"] in ("tie", "rounding") and rec["verdict"]["verify_argmax"]
    else:  # the planted one emits another token than its own pass's argmax
        assert rec["verdict"]["verdict"] == "structural" and not rec["verdict"]["verify_argmax"]
    assert f"verdict: {rec['verdict']['verdict']}" in printed
    assert rec["prompt_ids"] == [int(w[1:]) for w in rec["prompt"].split()]
    assert rec["numerical_env"]["decoder"]["dtype"] == "bf16" and rec["numerical_env"]["decoder"]["attention"] == "sdpa"
    assert rec["options"]["decoder"]["decoder"] == decoder and rec["options"]["reference"]["decoder"] == "ar-ref"
    assert (
        rec["versions"]["torch"]
        and rec["versions"]["transformers"]
        and rec["recorded_env"]["decoder"]["dtype"] == "bf16"
    )
    assert rec["command"].startswith("orthrus replay ") and f"--prompt-id {pid}" in rec["command"]
    assert rec["models"]["decoder"] == str(res / "models" / "m")
    # a prompt whose trajectories match (the honest loop's, most of them on any CPU) has nothing to
    # replay; a missing prompt is named
    honest = decoded["orthrus"]
    same = next(p for p in ref.index if list(ref[p]) == list(honest[p]))
    honest_argv = [*argv[:4], "--decoder", "orthrus", *argv[6:-4]]
    assert cli([*honest_argv, "--prompt-id", same]) == 2
    assert "no divergence to replay" in capsys.readouterr().err
    assert cli([*argv[:-4], "--prompt-id", "nope"]) == 2
    assert "has no prompt 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_replay_of_a_transformers_decoder_rebuilds_its_generate_row(tmp_path, monkeypatch, capsys, verify_kernel_noise):
    """prompt-lookup on the teacher: its own row is the logits `generate` returns for the token (no
    hidden states), and the replay reproduces the run and gives the divergence a verdict."""
    monkeypatch.chdir(tmp_path)
    res, ref, _ = _run(tmp_path)
    common = [
        "--prompts",
        "results/prompts/eval.parquet",
        "--precision",
        "bf16",
        "--attention",
        "sdpa",
        "--max-new-tokens",
        "40",
        "--no-progress",
    ]
    assert (
        decode(
            [
                "--decoder",
                "prompt-lookup",
                "--model-path",
                "results/teacher",
                "--model-name",
                "teacher",
                *common,
                "--out",
                "results/decode/teacher/prompt-lookup-bf16-sdpa.parquet",
            ]
        )
        == 0
    )
    pld = pd.read_parquet(res / "decode/teacher/prompt-lookup-bf16-sdpa.parquet").set_index("prompt_id")["tokens"]
    parted = [
        p
        for p in ref.index
        if (t := first_divergence(list(ref[p]), list(pld[p]))) is not None and t < min(len(ref[p]), len(pld[p]))
    ]
    assert parted, "no bf16 divergence of prompt-lookup to replay"
    out = tmp_path / "pld.json"
    assert (
        cli(
            [
                "replay",
                str(res),
                "--model",
                "teacher",
                "--decoder",
                "prompt-lookup",
                "--precision",
                "bf16",
                "--attention",
                "sdpa",
                "--prompt-id",
                parted[0],
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rec = json.loads(out.read_text())
    assert rec["reproduced"]["all"] and rec["forwards"]["decoder"]["kind"] == "generate output_logits"
    assert rec["max_abs_hidden_diff"] is None and rec["first_layer_diverging"] is None
    assert rec["forwards"]["decoder"]["replayed_prefix_matches"]
    assert rec["verdict"]["verdict"] in ("tie", "rounding"), rec["verdict"]
    assert "own row (generate output_logits)" in capsys.readouterr().out
