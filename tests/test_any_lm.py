"""Any causal LM as the reference: the decoders that need no diffusion view (ar-ref, assisted,
prompt-lookup, an engine's file) run on tiny random Llama and Mistral teachers built here, through
the same loading code (never remote code); the Orthrus loop and the config check refuse them, naming
why."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from helpers import EOS, VOCAB, word_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from orthrus.cli import main as cli
from orthrus.options import DecodeOptions

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    eos_token_id=EOS,
    initializer_range=0.2,
)
ARCHS = {"llama": (LlamaForCausalLM, LlamaConfig), "mistral": (MistralForCausalLM, MistralConfig)}
PROMPTS = pd.DataFrame(
    {"prompt_id": ["a", "b", "c"], "domain": ["x", "x", "y"], "prompt": ["w5 w6 w7", "w9", "w11 w12"]}
)


def save(path, arch, layers=2, seed=0):
    """A tiny random `arch` causal LM with the word tokenizer, its config naming remote code that
    plants a marker file if anything ever runs it."""
    cls, conf = ARCHS[arch]
    torch.manual_seed(seed)
    model = cls(conf(num_hidden_layers=layers, **SMALL)).eval()
    model.generation_config.eos_token_id = [EOS]
    model.save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"}
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "modeling_remote.py").write_text(f"open({str(path / 'REMOTE_CODE_RAN')!r}, 'w').close()\n")
    return path


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_plain_decoders_perplexity_and_forensics_run_on_another_architecture(tmp_path, arch):
    teacher = save(tmp_path / arch, arch)
    draft = save(tmp_path / f"{arch}-draft", arch, layers=1, seed=1)
    PROMPTS.to_parquet(tmp_path / "p.parquet")
    common = [
        "--model-path",
        str(teacher),
        "--model-name",
        arch,
        "--prompts",
        str(tmp_path / "p.parquet"),
        "--max-new-tokens",
        "10",
        "--no-progress",
    ]
    out = {}
    for decoder, extra in (("ar-ref", []), ("prompt-lookup", []), ("assisted", ["--draft-path", str(draft)])):
        files = [str(tmp_path / f"{decoder}-{p}-{a}.parquet") for p, a in (("fp32", "eager"), ("bf16", "sdpa"))]
        assert (
            cli(
                [
                    "decode",
                    "--decoder",
                    decoder,
                    *common,
                    *extra,
                    "--precision",
                    "fp32",
                    "bf16",
                    "--attention",
                    "eager",
                    "sdpa",
                    "--out",
                    *[
                        str(tmp_path / f"{decoder}-{p}-{a}.parquet")
                        for p in ("fp32", "bf16")
                        for a in ("eager", "sdpa")
                    ],
                ]
            )
            == 0
        )
        out[decoder] = {f: pd.read_parquet(f) for f in files}
        for df in out[decoder].values():
            assert (df.finish_reason != "error").all(), df.error.tolist()
            assert json.loads(df.env.iloc[0])["loop"] == "transformers.generate"
    ref32 = out["ar-ref"][str(tmp_path / "ar-ref-fp32-eager.parquet")]
    for decoder in ("prompt-lookup", "assisted"):  # lossless in exact arithmetic: fp32 emits the reference's tokens
        spec32 = out[decoder][str(tmp_path / f"{decoder}-fp32-eager.parquet")]
        assert [list(t) for t in spec32.tokens] == [list(t) for t in ref32.tokens], decoder
    assert (
        cli(
            [
                "perplexity",
                "--teacher",
                str(teacher),
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--decode",
                str(tmp_path / "ar-ref-fp32-eager.parquet"),
                "--out",
                str(tmp_path / "ppl.parquet"),
            ]
        )
        == 0
    )
    assert pd.read_parquet(tmp_path / "ppl.parquet").ppl.notna().all()
    # an engine's file against this reference: one planted token, found and scored by the teacher
    records = []
    for pid, toks in zip(ref32.prompt_id, ref32.tokens):
        toks = [int(t) for t in toks]
        if pid == "a":
            toks[2] = 40 if toks[2] != 40 else 41
        records.append(
            {"prompt_id": pid, "token_ids": toks, "env": {"engine": "test", "dtype": "float32", "kernel": "eager"}}
        )
    (tmp_path / "engine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    options = DecodeOptions(decoder="external", precision="fp32", attention="eager", max_new_tokens=10)
    assert (
        cli(
            [
                "ingest",
                "--file",
                str(tmp_path / "engine.jsonl"),
                "--name",
                "engine",
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--model-path",
                str(teacher),
                "--options",
                options.to_json(),
                "--out",
                str(tmp_path / "ext.parquet"),
            ]
        )
        == 0
    )
    assert (
        cli(
            [
                "forensics",
                "--model-path",
                str(teacher),
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--decoded",
                str(tmp_path / "ext.parquet"),
                "--reference",
                str(tmp_path / "ar-ref-fp32-eager.parquet"),
                "--out",
                str(tmp_path / "fx.parquet"),
            ]
        )
        == 0
    )
    fx = pd.read_parquet(tmp_path / "fx.parquet")
    assert fx.prompt_id.tolist() == ["a"] and fx.position.tolist() == [2] and fx.margin_fp32.notna().all()
    assert not (teacher / "REMOTE_CODE_RAN").exists() and not (draft / "REMOTE_CODE_RAN").exists()


def test_the_orthrus_loop_and_the_config_check_name_what_needs_an_orthrus_family(tmp_path, capsys):
    teacher = save(tmp_path / "mistral", "mistral")
    PROMPTS.to_parquet(tmp_path / "p.parquet")
    for decoder in ("ar", "oracle", "orthrus"):
        assert (
            cli(
                [
                    "decode",
                    "--decoder",
                    decoder,
                    "--model-path",
                    str(teacher),
                    "--model-name",
                    "t",
                    "--prompts",
                    str(tmp_path / "p.parquet"),
                    "--precision",
                    "fp32",
                    "--out",
                    str(tmp_path / "o.parquet"),
                    *(["--reference", str(tmp_path / "r.parquet")] if decoder == "oracle" else []),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert (
            f"is a 'mistral' model; decoder {decoder} runs this package's loop, which needs a model of the families"
            in err
        ), err
    cfg = yaml.safe_load((ROOT / "tests/smoke/config.yaml").read_text())
    cfg["teacher"] = {"name": "teacher", "source": "hf", "path": str(teacher)}
    cfg["decode"]["decoders"], cfg["decode"]["controls"] = ["prompt-lookup"], ["oracle", "ar-batched"]
    cfg["benchmarks"] = {"enabled": True, "ar_baseline": "ours"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    text = res.stdout + res.stderr
    assert res.returncode != 0
    for key in ("models.smoke-ce", "models.smoke-kl", "decode.controls", "benchmarks.ar_baseline"):
        assert f"{key}: " in text and "is a 'mistral' model" in text, key
    # without what needs the loop, the study runs on the Mistral reference: no corpus, no distillation
    cfg["models"], cfg["decode"]["controls"], cfg["benchmarks"] = {}, ["ar-batched"], {"enabled": False}
    cfg["decode"]["grids"] = {"prompt-lookup": {"attentions": ["sdpa"]}}
    cfg["decode"]["external"] = {
        "engine": {"path": str(tmp_path / "engine.jsonl"), "precision": "bf16", "attention": "sdpa"}
    }
    (tmp_path / "engine.jsonl").write_text('{"prompt_id": "x", "token_ids": [], "env": {"engine": "test"}}\n')
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    for rule in (
        "decode_shard",
        "ingest_external",
        "forensics_external",
        "forensics",
        "perplexity",
        "analyze",
        "claims",
    ):
        assert f"\n{rule} " in res.stdout, rule
    assert "corpus_shard" not in res.stdout and "\ntrain " not in res.stdout and "train_teacher" not in res.stdout
