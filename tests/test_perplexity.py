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
