import math

import torch
from conftest import tiny_base

from orthrus.perplexity import response_scores


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
    assert all(m >= 0 for m in s["margins"])
    empty = response_scores(model, prompt, [])
    assert math.isnan(empty["ppl"]) and empty["margins"] == []
