import json

import pytest
import torch
from helpers import MASK, tiny_base, tiny_orthrus
from safetensors.torch import save_file
from tokenizers import Tokenizer, models
from transformers import DynamicCache, PreTrainedTokenizerFast

from orthrus import OrthrusForCausalLM
from orthrus.decode.loop import diffusion_proposals
from orthrus.models.cache import cache_kwarg
from orthrus.models.modeling import FAMILIES


def word_tokenizer(n):
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(n)}, unk_token="w0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1")


def both_views(model, ids):
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        ar = model(input_ids=ids[None], **cache_kwarg(model, cache), use_cache=True).logits
        diff = diffusion_proposals(model, ids[-1], cache, model.block_size)
    return ar, diff


TWINS = {
    "qwen3": ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"),
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj"),  # no q/k norms in the Llama family
}


@pytest.mark.parametrize("family", sorted(TWINS))
def test_from_base_copies_and_freezes(family):
    base = tiny_base(0, family=family)
    model = OrthrusForCausalLM.from_base(base, block_size=4, mask_token_id=MASK)
    assert isinstance(model, FAMILIES[family][2]) and isinstance(model, type(base))
    attn = model.model.layers[1].self_attn
    for name in TWINS[family]:
        assert torch.equal(getattr(attn, name).weight, getattr(attn, f"{name}_diff").weight)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("_diff." in n for n in trainable)
    assert len(trainable) == len(TWINS[family]) * model.config.num_hidden_layers
    assert model.config.block_size == 4 and model.config.mask_token_id == MASK
    ids = torch.tensor([3, 4, 5])
    assert torch.equal(model(ids[None]).logits, base(ids[None]).logits)


@pytest.mark.parametrize("n_tokens", [96, 80])
def test_new_mask_token(n_tokens):
    """At id len(tokenizer): grows the vocabulary only when that row does not exist (Qwen3 pads it)."""
    base = tiny_base(0)
    tok = word_tokenizer(n_tokens)
    model = OrthrusForCausalLM.from_base(base, block_size=4, tokenizer=tok)
    mask = model.config.mask_token_id
    assert mask == n_tokens and tok.convert_ids_to_tokens(mask) == "<|mask|>" and len(tok) == n_tokens + 1
    assert model.config.vocab_size == (96 if n_tokens < 96 else 128)
    emb = model.get_input_embeddings().weight
    assert torch.allclose(emb[mask], base.get_input_embeddings().weight[:n_tokens].mean(0), atol=1e-6)
    assert model.lm_head.weight.data_ptr() == emb.data_ptr()  # still tied


@pytest.mark.parametrize("family", sorted(TWINS))
def test_save_load_roundtrip_identical_logits(tmp_path, family):
    model = tiny_orthrus(0, 8, "random", family=family)
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["OrthrusLM"] and cfg["model_type"] == family
    assert cfg["block_size"] == 8 and cfg["mask_token_id"] == MASK
    assert (tmp_path / "model.safetensors").exists()
    loaded = OrthrusForCausalLM.from_pretrained(tmp_path)  # the entry point builds the checkpoint's family
    assert type(loaded) is FAMILIES[family][2]
    ids = torch.tensor([5, 9, 13, 2])
    for a, b in zip(both_views(model, ids), both_views(loaded, ids)):
        assert torch.equal(a, b)
    bf16 = OrthrusForCausalLM.from_pretrained(tmp_path, dtype="bf16")
    assert bf16.dtype == torch.bfloat16


def released_checkpoint(tmp_path, model, drop=None, reshape=None):
    """Write `model` the way chiennv/Orthrus-Qwen3-1.7B is published: names, config, remote code."""
    state = {k: v.clone().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    if drop:
        del state[drop]
    if reshape:
        state[reshape] = torch.zeros(3, 3)
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.update(
        architectures=["OrthrusLM"],
        auto_map={"AutoModelForCausalLM": "modeling_orthrus.OrthrusLM"},
        torch_dtype="bfloat16",
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sentinel = tmp_path / "REMOTE_CODE_RAN"
    (tmp_path / "modeling_orthrus.py").write_text(f"open({str(sentinel)!r}, 'w').write('yes')\n")
    return sentinel


def test_released_format_loads_without_remote_code(tmp_path):
    model = tiny_orthrus(1, 32, "random")
    sentinel = released_checkpoint(tmp_path, model)
    assert OrthrusForCausalLM.from_pretrained(tmp_path).dtype == torch.bfloat16  # the config's dtype, as transformers
    loaded = OrthrusForCausalLM.from_pretrained(tmp_path, dtype="fp32")
    assert not sentinel.exists()
    ids = torch.tensor([7, 8, 9])
    for a, b in zip(both_views(model, ids), both_views(loaded, ids)):
        assert torch.equal(a, b)


def test_missing_diff_key_is_named(tmp_path):
    key = "model.layers.1.self_attn.k_proj_diff.weight"
    released_checkpoint(tmp_path, tiny_orthrus(0, 8), drop=key)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        OrthrusForCausalLM.from_pretrained(tmp_path)


def test_wrong_shape_is_named(tmp_path):
    key = "model.layers.0.self_attn.q_proj_diff.weight"
    released_checkpoint(tmp_path, tiny_orthrus(0, 8), reshape=key)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        OrthrusForCausalLM.from_pretrained(tmp_path)


def test_plain_qwen3_is_not_an_orthrus_checkpoint(tmp_path):
    tiny_base(0).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="block_size"):
        OrthrusForCausalLM.from_pretrained(tmp_path)
    model = OrthrusForCausalLM.from_base(str(tmp_path), block_size=4, mask_token_id=MASK)
    assert model.block_size == 4


def test_pickled_weights_refused_unless_opted_in(tmp_path):
    model = tiny_orthrus(0, 8)
    model.save_pretrained(tmp_path)
    state = OrthrusForCausalLM.from_pretrained(tmp_path).state_dict()
    (tmp_path / "model.safetensors").unlink()
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(Exception, match="safetensors"):
        OrthrusForCausalLM.from_pretrained(tmp_path)
    assert OrthrusForCausalLM.from_pretrained(tmp_path, allow_pickle=True).block_size == 8


def test_missing_path_is_named():
    with pytest.raises(FileNotFoundError, match="no/such/dir"):
        OrthrusForCausalLM.from_pretrained("./no/such/dir")


def test_bad_model_files_are_named_in_one_line(tmp_path):
    from safetensors.torch import load_file, save_file

    from orthrus.models.loading import load_model
    from orthrus.options import DecodeOptions

    tiny_orthrus(0, 8).save_pretrained(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])  # a cut-off copy
    with pytest.raises(ValueError, match="model.safetensors: truncated or corrupt") as err:
        OrthrusForCausalLM.from_pretrained(tmp_path / "m")
    assert "\n" not in str(err.value)
    weights.write_bytes(good)
    state = load_file(weights)
    state["model.layers.1.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="weight model.layers.1.mlp.up_proj.weight holds non-finite values"):
        OrthrusForCausalLM.from_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match="non-finite"):  # the plain-model loader of the reference decoder too
        load_model(tmp_path / "m", DecodeOptions(decoder="ar-ref"))
    (tmp_path / "m" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        OrthrusForCausalLM.from_pretrained(tmp_path / "m")
    weights.unlink()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"no \*.safetensors weights"):
        OrthrusForCausalLM.from_pretrained(tmp_path / "m")


def test_library_arguments_are_checked_in_one_line(tmp_path):
    """Arguments that Python would take silently (a truthy string, a float id, a bool id) are refused."""
    from orthrus.errors import InputError
    from orthrus.models.precision import numerical_env

    with pytest.raises(InputError, match="block_size must be an integer >= 2"):
        OrthrusForCausalLM.from_base(tiny_orthrus(0, 4), block_size=4.7, mask_token_id=MASK)
    with pytest.raises(InputError, match="mask_token_id must be None"):
        OrthrusForCausalLM.from_base(tiny_orthrus(0, 4), block_size=4, mask_token_id=True)
    tiny_orthrus(0, 4).save_pretrained(tmp_path / "m")
    with pytest.raises(InputError, match="allow_pickle must be True or False"):
        OrthrusForCausalLM.from_pretrained(tmp_path / "m", allow_pickle="no")
    assert numerical_env(dtype="bf16")["dtype"] == "bf16"


def test_a_plain_model_missing_a_tensor_is_refused_by_every_loader(tmp_path):
    """transformers initialises a missing weight at random and says so in a log line only: the
    teacher of the reference decoder, the corpus, the lm-eval baseline and `from_base` would be
    noise. Every loader names the tensor instead."""
    from safetensors.torch import load_file, save_file

    from orthrus.data.corpus import load_teacher
    from orthrus.errors import InputError
    from orthrus.models.loading import load_model
    from orthrus.options import DecodeOptions

    tiny_base(0).save_pretrained(tmp_path / "t")
    weights = tmp_path / "t" / "model.safetensors"
    state = load_file(weights)
    state.pop("model.layers.1.mlp.up_proj.weight")
    save_file(state, str(weights), metadata={"format": "pt"})
    for load in (
        lambda: load_model(tmp_path / "t", DecodeOptions(decoder="ar-ref")),
        lambda: load_model(tmp_path / "t", DecodeOptions(decoder="ar")),
        lambda: OrthrusForCausalLM.from_base(str(tmp_path / "t"), block_size=4, mask_token_id=MASK),
    ):
        with pytest.raises(InputError, match=r"missing: model\.layers\.1\.mlp\.up_proj\.weight"):
            load()
    with pytest.raises(InputError, match="missing: model.layers.1.mlp.up_proj.weight"):
        load_teacher(str(tmp_path / "t"))
    state["model.layers.1.mlp.up_proj.weight"] = torch.zeros(64, 32, dtype=torch.int32)
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(InputError, match="not floating point|misshaped"):
        load_model(tmp_path / "t", DecodeOptions(decoder="ar-ref"))


def _doctor(tmp_path, case):
    """A saved Orthrus checkpoint with one thing wrong (issue 35's doctored-checkpoint probe)."""
    from safetensors.torch import load_file

    d = tmp_path / case
    tiny_orthrus(0, 4).save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    if case == "int-diffusion":
        state = load_file(d / "model.safetensors")
        key = "model.layers.0.self_attn.q_proj_diff.weight"
        state[key] = state[key].to(torch.int32)
        save_file(state, str(d / "model.safetensors"), metadata={"format": "pt"})
    elif case == "block-size-0":
        cfg["block_size"] = 0
    elif case == "mask-outside":
        cfg["mask_token_id"] = cfg["vocab_size"] + 1000
    (d / "config.json").write_text(json.dumps(cfg))
    return d


DOCTORED = [
    ("int-diffusion", r"model\.safetensors:model\.layers\.0\.self_attn\.q_proj_diff\.weight \(I32\)"),
    ("block-size-0", r"config\.json: key 'block_size' is 0, not an integer >= 2"),
    ("mask-outside", r"config\.json: key 'mask_token_id' is 1096, not an id of the vocabulary"),
]


@pytest.mark.parametrize("case, what", DOCTORED, ids=[c for c, _ in DOCTORED])
def test_a_doctored_checkpoint_is_refused_at_load_naming_file_and_key(tmp_path, case, what, capsys):
    """Integer diffusion weights, block_size 0 or a mask token outside the vocabulary: refused by the
    library's from_pretrained and by `orthrus decode` alike, naming the file and the key or weight."""
    import pandas as pd

    from orthrus.cli import main as cli
    from orthrus.errors import ModelError

    d = _doctor(tmp_path, case)
    with pytest.raises(ModelError, match=what) as err:
        OrthrusForCausalLM.from_pretrained(d)
    assert str(d) in str(err.value) and "\n" not in str(err.value)
    pd.DataFrame({"prompt_id": ["a"], "domain": ["qa"], "prompt": ["w3 w4"]}).to_parquet(tmp_path / "p.parquet")
    assert (
        cli(
            [
                "decode",
                "--decoder",
                "orthrus",
                "--model-path",
                str(d),
                "--model-name",
                "m",
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--precision",
                "fp32",
                "--out",
                str(tmp_path / "o.parquet"),
            ]
        )
        == 2
    )
    out = capsys.readouterr().err
    assert __import__("re").search(what, out) and str(d) in out, out
