"""Nothing this package calls is deprecated in the installed transformers. transformers announces a
removal with a FutureWarning releases before it breaks (5.24: `past_key_values is deprecated and
will be removed in version 5.40.0 ... Use cache instead`), so here a FutureWarning is an error:
CI runs this against the pinned release and against the newest."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import MASK, teacher_and_orthrus

import orthrus
from orthrus.audit.forensics import stepwise
from orthrus.decode.stage import decode_one
from orthrus.distill.data import make_batch
from orthrus.distill.loss import block_loss
from orthrus.distill.reference import blockwise_loss
from orthrus.distill.settings import offset_weights
from orthrus.models.cache import NEW, OLD, cache_kwarg
from orthrus.options import DecodeOptions

pytestmark = pytest.mark.filterwarnings("error::FutureWarning")
PROMPT = torch.tensor([5, 6, 7, 9, 3])


@pytest.fixture(scope="module")
def models():
    return teacher_and_orthrus(0, "sdpa", block_size=4)


@pytest.mark.parametrize("decoder", ["orthrus", "ar", "orthrus-lossy"])
def test_our_loop_decodes_without_a_future_warning(models, decoder):
    _, orth = models
    out = orthrus.generate(orth, PROMPT, DecodeOptions(decoder=decoder, precision="fp32", max_new_tokens=12))
    assert len(out.tokens) > 0


@pytest.mark.parametrize("decoder", ["ar-ref", "prompt-lookup", "oracle"])
def test_transformers_decoders_and_the_oracle_decode_without_a_future_warning(models, decoder):
    teacher, _ = models
    base = DecodeOptions(decoder="ar-ref", precision="fp32", max_new_tokens=12)
    ref = decode_one(teacher, PROMPT, base).tokens
    opts = base.replace(decoder=decoder, block_size=4) if decoder == "oracle" else base.replace(decoder=decoder)
    assert decode_one(teacher, PROMPT, opts, reference=ref).tokens == ref  # fp32: every decoder is exact


def test_forensics_and_distillation_forwards_raise_no_future_warning(models):
    teacher, orth = models
    logits, hidden = stepwise(teacher, PROMPT.tolist(), [11, 12])
    assert logits.shape[-1] == teacher.config.vocab_size and len(hidden) == teacher.config.num_hidden_layers + 1
    g = np.random.default_rng(0)
    batch = make_batch(
        [g.integers(3, MASK - 1, size=20)],
        [np.array([5, 11])],
        4,
        offset_weights([1.0, 0.5, 0.25], 4),
        orth.mask_token_id,
        0,
    )
    loss, _ = block_loss(orth, batch, "ce", 0.5)
    assert torch.isclose(loss, blockwise_loss(orth, batch, "ce", 0.5), rtol=1e-4)


def test_the_cache_keyword_is_the_one_the_installed_forward_takes(models):
    """`cache` where transformers has renamed it (5.24 on), `past_key_values` before."""
    import inspect

    teacher, orth = models
    for model in (teacher, orth, orth.model):
        (keyword,) = cache_kwarg(model, None)
        params = inspect.signature(type(model).forward).parameters
        assert keyword in params and keyword in (NEW, OLD)
        assert keyword == NEW or NEW not in params
