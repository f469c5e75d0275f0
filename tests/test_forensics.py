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
