import math

import torch
from helpers import tiny_base

from orthrus.analysis.perplexity import response_scores


def test_response_scores_ppl_entropy_margins_of_the_response_only():
    model = tiny_base(0)
    prompt, response = [5, 6, 7, 8], [9, 10, 11]
    ids = torch.tensor([prompt + response])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100  # the prompt is conditioned on, not scored
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    s = response_scores(model, prompt, response)
    assert math.isclose(s["ppl"], math.exp(out.loss.item()), rel_tol=1e-5)
    # the distributions that predict the response tokens: positions len(prompt)-1 .. end-1
    logits = out.logits[0, len(prompt) - 1 : -1]
    ent = torch.distributions.Categorical(logits=logits).entropy().mean().item()
    assert math.isclose(s["entropy"], ent, rel_tol=1e-5)
    top = logits.topk(2, dim=-1).values
    assert s["margins"] == (top[:, 0] - top[:, 1]).tolist() and len(s["margins"]) == len(response)
    empty = response_scores(model, prompt, [])
    assert math.isnan(empty["ppl"]) and empty["margins"] == []


def test_score_renders_each_prompt_with_its_rows_message_format():
    import json

    import pandas as pd
    from helpers import MASK
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from orthrus.analysis.perplexity import score
    from orthrus.chat import render_chat

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(MASK)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1")
    fast.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}w3 {% endif %}{{ m['content'] }} {% endfor %}"
    )
    model = tiny_base(0)
    prompts = pd.DataFrame({"prompt_id": ["a"], "prompt": ["w5 w6"]})
    from orthrus.options import DecodeOptions

    # the options record as the decode stage writes it, and a record from before the options existed
    envs = [
        json.dumps({"options": DecodeOptions(decoder="ar-ref", message="none").record()}),
        json.dumps({"message": "empty"}),
    ]
    rows = [
        dict(
            model="t",
            decoder="ar-ref",
            precision="fp32",
            attention="eager",
            prompt_id="a",
            domain="d",
            tokens=[9, 10],
            finish_reason="length",
            env=env,
        )
        for env in envs
    ]
    got = score(model, fast, prompts, pd.DataFrame(rows), "fp32")["ppl"].tolist()
    want = [response_scores(model, render_chat(fast, "w5 w6", m), [9, 10])["ppl"] for m in ("none", "empty")]
    assert got == want and got[0] != got[1]
