"""The zoo's MTP subject (orthrus.zoo.subject_mtp) for transformers' `use_mtp=True` case
(huggingface/transformers#47932).

The fast tests need no release: the subject builds, its bytes follow from the seed, its MTP
weights sit under the names transformers 5.15 loads, and the main environment reads it as a plain
causal LM (the judge's target). The tests that run a release need its environment, built by the zoo
(.zoo-envs/transformers-5.15.0 and -5.15.1), and skip naming it when it is missing.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from orthrus.zoo import subject_mtp as sm

ROOT = Path(__file__).resolve().parents[1]
ENVS = ROOT / ".zoo-envs"
RELEASES = ("5.15.0", "5.15.1")
# transformers 5.15's Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected: the MTP layer of
# GLM-4.5-Air (46 layers) and GLM-4.5 (92); MtpModel.from_pretrained keeps the one >= num_hidden_layers
GLM4_MOE_MTP_PATTERNS = (r"model\.layers\.92.*", r"model\.layers\.46.*")


@pytest.fixture(scope="module")
def subject(tmp_path_factory) -> Path:
    return sm.mtp_subject(tmp_path_factory.mktemp("mtp") / "subject", seed=0)


def tensor_names(path: Path) -> set[str]:
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


def test_builds_safetensors_only(subject):
    """A directory every transformers 5 release reads: config, generation config, safetensors."""
    assert sorted(p.name for p in subject.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]
    cfg = json.loads((subject / "config.json").read_text())
    assert cfg["model_type"] == "glm4_moe" and cfg["num_hidden_layers"] == 46 and cfg["num_nextn_predict_layers"] == 1
    assert cfg["first_k_dense_replace"] == 0  # 5.15.0 and 5.15.1 must build the same MoE MTP block


def test_bytes_follow_the_seed(subject, tmp_path):
    """The same seed writes the same bytes; another seed other weights."""
    again = sm.mtp_subject(tmp_path / "again", seed=0)
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        assert (again / name).read_bytes() == (subject / name).read_bytes(), name
    other = sm.mtp_subject(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (subject / "model.safetensors").read_bytes()


def test_mtp_weights_under_the_names_5_15_loads(subject):
    """The MTP layer is `model.layers.46.`: the layer number GLM4-MoE's class hard-codes, equal to
    num_hidden_layers so that 5.15 renames it to MTP layer 0; its own tensors carry GLM-4.5's names."""
    names = tensor_names(subject)
    mtp = {n for n in names if n.startswith("model.layers.46.")}
    own = {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"}
    assert {f"model.layers.46.{k}" for k in own} <= mtp
    block = {
        "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
        "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate.weight",
        "mlp.gate.e_score_correction_bias", "mlp.shared_experts.gate_proj.weight",
        "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight",
    } | {f"mlp.experts.{e}.{w}_proj.weight" for e in range(4) for w in ("gate", "up", "down")}  # fmt: skip
    assert mtp == {f"model.layers.46.{k}" for k in own | block}
    assert sorted(mtp) == sorted(sm.mtp_names())
    regex = re.compile("|".join(GLM4_MOE_MTP_PATTERNS))
    assert {n for n in names if regex.search(n)} == mtp  # exactly the MTP layer, nothing of the main model
    assert not any(n.startswith("model.layers.47.") for n in names)


def test_main_environment_loads_it_as_a_plain_causal_lm(subject):
    """The judge's target: the main environment's transformers reads the directory with every main
    weight found and the MTP layer left aside, and its logits are finite."""
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(subject, dtype=torch.float32, output_loading_info=True)
    assert type(model).__name__ == "Glm4MoeForCausalLM"
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert not any("layers.46" in n for n, _ in model.named_parameters())
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([[5, 17, 300, 41]])).logits
    assert logits.shape == (1, 4, 2112) and torch.isfinite(logits).all()


def test_mtp_draft_follows_the_target_less_sharply(subject):
    """Why the bug shows on this subject: the MTP layer reads the new token's embedding and scales its
    logits by MTP_HEAD_GAIN, so its draft ranks like the target's next step but flatter."""
    sd = sm.state_dict(0)
    eh = sd["model.layers.46.eh_proj.weight"]
    h = eh.shape[0]
    assert (eh[:, :h] - torch.eye(h)).abs().max() < 0.5 and eh[:, h:].abs().max() < 0.5
    assert torch.all(sd["model.layers.46.shared_head.norm.weight"] == sm.MTP_HEAD_GAIN)


# --------------------------------------------------------------------------- in a release's environment

RELEASE_SCRIPT = """
import json, sys, torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = torch.tensor([[5, 17, 300, 41]])
with torch.inference_mode():
    logits = m(input_ids=ids, use_cache=False).logits[0, -1]
torch.manual_seed(0)
out = m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=2, use_mtp=True,
                 pad_token_id=0)
print(json.dumps({"logits": logits.tolist(), "tokens": out[0, 4:].tolist()}))
"""


@pytest.mark.parametrize("version", RELEASES)
def test_release_loads_the_mtp_layer_and_agrees_with_the_main_environment(subject, version):
    """In the release's own environment, generate(use_mtp=True) runs (its MtpModel raises when an MTP
    weight is missing), and the main model's logits equal the main environment's to 1e-5."""
    python = ENVS / f"transformers-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {python}: the zoo builds it (snakemake --configfile configs/zoo.yaml)")
    proc = subprocess.run(
        [str(python), "-c", RELEASE_SCRIPT, str(subject)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got["tokens"]) == 2
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(subject, dtype=torch.float32).eval()
    with torch.inference_mode():
        ours = model(input_ids=torch.tensor([[5, 17, 300, 41]]), use_cache=False).logits[0, -1]
    assert (torch.tensor(got["logits"]) - ours).abs().max() <= 1e-5
