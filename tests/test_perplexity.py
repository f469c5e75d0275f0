import math

import torch
from conftest import tiny_base

from orthrus.perplexity import response_ppl


def test_response_ppl_is_exp_mean_nll_of_the_response_only():
    model = tiny_base(0)
    prompt, response = [5, 6, 7, 8], [9, 10, 11]
    ids = torch.tensor([prompt + response])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100  # the prompt is conditioned on, not scored
    with torch.no_grad():
        nll = model(input_ids=ids, labels=labels).loss.item()
    assert math.isclose(response_ppl(model, prompt, response), math.exp(nll), rel_tol=1e-5)
    assert math.isnan(response_ppl(model, prompt, []))


def test_score_renders_each_prompt_with_its_rows_message_format():
    import json

    import pandas as pd
    from conftest import MASK
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from orthrus.perplexity import score
    from orthrus.prompts import render_chat

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(MASK)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1")
    fast.chat_template = "{% for m in messages %}{% if m['role'] == 'system' %}w3 {% endif %}{{ m['content'] }} {% endfor %}"
    model = tiny_base(0)
    prompts = pd.DataFrame({"prompt_id": ["a"], "prompt": ["w5 w6"]})
    rows = [dict(model="t", precision="fp32", attention="eager", prompt_id="a", tokens=[9, 10], finish_reason="length",
                 env=json.dumps({"message": m})) for m in ("none", "empty")]
    got = score(model, fast, prompts, pd.DataFrame(rows), "fp32")["ppl"].tolist()
    want = [response_ppl(model, render_chat(fast, "w5 w6", m), [9, 10]) for m in ("none", "empty")]
    assert got == want and got[0] != got[1]
