import torch
from conftest import tiny_orthrus

import orthrus
from orthrus.forensics import replay_verify, stepwise
from orthrus.stats import first_divergence


def test_replay_reproduces_the_run_at_every_divergence():
    """The replayed verify row picks the token Orthrus emitted; the stepwise row the AR token."""
    model = tiny_orthrus(0, 8, "noisy", attn="sdpa", noise=1e-2, peaked=1.0, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(4)
    checked = 0
    for _ in range(150):
        prompt = torch.randint(2, 90, (6,), generator=g).tolist()
        ar = orthrus.generate(model, torch.tensor(prompt), mode="ar", max_new_tokens=40, eos_token_id=[]).tokens.tolist()
        out = orthrus.generate(model, torch.tensor(prompt), mode="orthrus", max_new_tokens=40, eos_token_id=[])
        orth = out.tokens.tolist()
        t = first_divergence(ar, orth)
        if t is None:
            continue
        step_logits, step_hidden = stepwise(model, prompt, ar[:t])
        ver_logits, ver_hidden = replay_verify(model, prompt, orth, out.stats["accepted"], t, 40)
        assert int(step_logits.argmax()) == ar[t]
        assert int(ver_logits.argmax()) == orth[t]
        assert len(step_hidden) == len(ver_hidden) == model.config.num_hidden_layers + 1
        checked += 1
        if checked == 4:
            break
    assert checked >= 3, "too few bf16 divergences to test the replay"


def test_replay_equals_stepwise_in_fp32_on_matching_run():
    model = tiny_orthrus(1, 4, "noisy", peaked=3.0)
    prompt = [5, 6, 7]
    out = orthrus.generate(model, torch.tensor(prompt), mode="orthrus", max_new_tokens=20, eos_token_id=[])
    toks = out.tokens.tolist()
    for t in range(1, 20):
        a, _ = stepwise(model, prompt, toks[:t])
        b, _ = replay_verify(model, prompt, toks, out.stats["accepted"], t, 20)
        assert int(a.argmax()) == int(b.argmax()) == toks[t]
        assert torch.allclose(a, b, atol=1e-4)


def test_forensics_of_a_transformers_decoder_records_the_reference_margins(tmp_path):
    """For assisted / prompt-lookup files the model is the teacher: margins in its own precision
    and in fp32 at the first divergence; the Orthrus block replay columns stay empty."""
    import pandas as pd
    from conftest import MASK, tiny_base
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from orthrus.forensics import main as forensics
    from orthrus.trajectories import main as decode

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(MASK)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tiny_base(0).save_pretrained(tmp_path / "teacher")
    fast.save_pretrained(tmp_path / "teacher")
    pd.DataFrame({"prompt_id": ["a", "b"], "domain": ["x", "y"], "prompt": ["w5 w6 w7", "w9 w3"]}).to_parquet(tmp_path / "p.parquet")
    assert decode(["--decoder", "ar-ref", "--model-path", str(tmp_path / "teacher"), "--model-name", "teacher",
                   "--precision", "bf16", "--attention", "sdpa", "--prompts", str(tmp_path / "p.parquet"),
                   "--max-new-tokens", "12", "--no-progress", "--out", str(tmp_path / "ref.parquet")]) == 0
    ref = pd.read_parquet(tmp_path / "ref.parquet")
    fake = ref.assign(decoder="prompt-lookup")
    fake.at[0, "tokens"] = [*ref.tokens[0][:3], (int(ref.tokens[0][3]) + 1) % MASK, *ref.tokens[0][4:]]
    fake.to_parquet(tmp_path / "lookup.parquet")
    assert forensics(["--model-path", str(tmp_path / "teacher"), "--prompts", str(tmp_path / "p.parquet"),
                      "--decoded", str(tmp_path / "lookup.parquet"), "--reference", str(tmp_path / "ref.parquet"),
                      "--max-new-tokens", "12", "--out", str(tmp_path / "fx.parquet")]) == 0
    fx = pd.read_parquet(tmp_path / "fx.parquet")
    assert len(fx) == 1 and fx.decoder.iloc[0] == "prompt-lookup" and fx.position.iloc[0] == 3
    r = fx.iloc[0]
    assert r.margin_native >= 0 and r.margin_fp32 >= 0 and r.replay_consistent
    assert pd.isna(r.verify_margin) and pd.isna(r.first_layer_diverging) and len(r.max_abs_hidden_diff) == 0
