"""The guarded verify (`DecodeOptions.verify_guard`): near-tie rows of a verify block decided by a
single-token AR forward instead."""

import pytest
import torch
from helpers import MASK, tiny_orthrus

import orthrus
from orthrus.audit.forensics import replay_verify
from orthrus.options import DecodeOptions, OptionsError
from orthrus.stats import first_divergence


def _prompts(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, MASK, (int(k),), generator=g) for k in torch.randint(2, 10, (n,), generator=g)]


def test_guard_zero_is_the_plain_loop_and_fp32_output_is_unchanged():
    model = tiny_orthrus(0, 8, "noisy", noise=1e-2, peaked=1.0)
    for p in _prompts(12):
        plain = orthrus.generate(model, p, max_new_tokens=40)
        off = orthrus.generate(model, p, max_new_tokens=40, verify_guard=0.0)
        on = orthrus.generate(model, p, max_new_tokens=40, verify_guard=0.5)
        ar = orthrus.generate(model, p, max_new_tokens=40, decoder="ar")
        assert off.tokens.tolist() == plain.tokens.tolist() and off.stats == {
            **plain.stats,
            "seconds": off.stats["seconds"],
        }
        assert on.tokens.tolist() == plain.tokens.tolist() == ar.tokens.tolist()
        assert on.stats["n_verify"] >= plain.stats["n_verify"]


@pytest.mark.slow
def test_guard_in_bf16_matches_at_least_as_often_and_keeps_the_replay_exact(verify_kernel_noise):
    """bf16 sdpa on a model whose verify blocks part from single steps (by a planted kernel
    difference, so on any CPU): the guarded loop matches the AR view on at least as many prompts,
    and a forensics replay still is the run."""
    model = tiny_orthrus(0, 8, "noisy", attn="sdpa", noise=1e-2, peaked=1.0, dtype=torch.bfloat16)
    opts = DecodeOptions(decoder="orthrus", precision="bf16", attention="sdpa", max_new_tokens=40)
    plain = guarded = forwards = guarded_forwards = 0
    checked = 0
    for p in _prompts(40, seed=4):
        ar = orthrus.generate(model, p, opts, decoder="ar").tokens.tolist()
        a = orthrus.generate(model, p, opts)
        b = orthrus.generate(model, p, opts, verify_guard=0.25)
        plain += a.tokens.tolist() == ar
        guarded += b.tokens.tolist() == ar
        forwards += a.stats["n_verify"]
        guarded_forwards += b.stats["n_verify"]
        t = first_divergence(ar, b.tokens.tolist())
        if t is not None and t < min(len(ar), len(b.tokens)) and checked < 3:
            logits, _, replayed, blocks = replay_verify(model, p.tolist(), opts.replace(verify_guard=0.25), t)
            assert replayed == b.tokens.tolist()[: t + 1] and int(logits.argmax()) == b.tokens[t]
            checked += 1
    assert plain < 40, "the planted kernel difference parted no prompt: nothing for the guard to restore"
    assert guarded >= plain and guarded_forwards > forwards


def test_guard_is_a_greedy_loop_option():
    with pytest.raises(OptionsError, match="verify_guard"):
        DecodeOptions(verify_guard=-1.0)
    with pytest.raises(OptionsError, match="verify_guard"):
        DecodeOptions(verify_guard=float("nan"))
    with pytest.raises(OptionsError, match="greedy"):
        DecodeOptions(verify_guard=0.1, temperature=0.5)
    with pytest.raises(OptionsError, match="verify_guard"):
        DecodeOptions(decoder="ar-ref", verify_guard=0.1)
