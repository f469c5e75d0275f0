"""Tiny world: domain generators, tokenizer, micro teacher."""

from __future__ import annotations

import json
import random
import re

import pytest

from orthrus.world import code, domains

MICRO = {
    "steps": 3,
    "warmup_steps": 0,  # below steps, as the section asks
    "batch_size": 4,
    "length_buckets": 1,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate_size": 64,
    "eval_per_domain": 0,
    "vocab_size": 384,
    "log_every": 1,
}


def test_all_twelve_domains_present():
    assert domains.DOMAINS == [
        "code",
        "code-ru",
        "creative-en",
        "gec-en",
        "gec-ru",
        "math",
        "math-ru",
        "poetry-en",
        "poetry-ru",
        "qa",
        "qa-ru",
        "wmt-ru-en",
    ]
    with pytest.raises(KeyError):
        domains.sample("nope", random.Random(0))


@pytest.mark.parametrize("domain", domains.DOMAINS)
def test_generators_deterministic_ascii_short(domain):
    a = [domains.sample(domain, random.Random(7)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    rng1, rng2 = domains.domain_rng(3, domain), domains.domain_rng(3, domain)
    s1 = [domains.sample(domain, rng1) for _ in range(30)]
    s2 = [domains.sample(domain, rng2) for _ in range(30)]
    assert s1 == s2
    assert len({p for p, _ in s1}) > 5  # varied prompts
    for p, ans in s1:
        assert p and ans and p.isascii() and ans.isascii()
        assert len(p) < 200


def test_math_answers_are_correct():
    rng = random.Random(1)
    for _ in range(50):
        p, a = domains.sample("math", rng)
        expr = p.removeprefix("Compute ").removesuffix(". Show the steps.")
        assert a.endswith(f"The answer is {eval(expr)}.")


def test_qa_open_questions_add_free_words_around_the_determined_facts():
    rng = domains.domain_rng(0, "qa", "test")
    samples = [domains.sample("qa", rng) for _ in range(400)]
    open_ = [(p, a) for p, a in samples if ". Tell me about " in p]
    assert 0.65 < len(open_) / len(samples) < 0.85  # three prompts in four
    for p, a in samples:
        m = re.search(r"The record for (\w+) says the color is (\w+) and the age is (\d+)\.", a)
        assert m, a  # the facts, as the tiny qa task reads them
        name, color, age = m.groups()
        assert f"{name} {color} {age}" in p  # determined by the records in the prompt
    # free words: the same facts come with different answers
    assert len({a for _, a in open_}) == len(open_)
    assert all(any(a.count(h) for h in domains._QA_HEARSAY) for _, a in open_)


def test_translation_has_equally_good_renderings():
    rng = domains.domain_rng(0, "wmt-ru-en", "test")
    answers = " ".join(domains.sample("wmt-ru-en", rng)[1] for _ in range(300))
    for words in domains.EN_SYNONYMS.values():
        assert all(f" {w} " in answers for w in words), words
    assert domains.UNCERTAINTY["wmt-ru-en"] == "mixed"


def test_open_domains_mix_known_and_new_texts():
    for d in ("creative-en", "poetry-en", "poetry-ru"):
        rng = domains.domain_rng(0, d, "test")
        prompts = [domains.sample(d, rng)[0] for _ in range(400)]
        known = [p for p in prompts if ("old fable" in p) or ("old rhyme" in p) or ("staryj stih" in p)]
        assert abs(len(known) / len(prompts) - domains.KNOWN_SHARE) < 0.1, (d, len(known))
        # few known texts (learnt by heart), many new prompts
        assert len(set(known)) == domains.KNOWN_TEXTS and len(set(prompts) - set(known)) > 100, d


def test_known_and_new_open_texts_have_the_same_length():
    """Length must not tell a known text from a composed one (Table 6 adjusts for length)."""
    for d in ("creative-en", "poetry-en", "poetry-ru"):
        rng = domains.domain_rng(0, d, "test")
        sizes = {True: set(), False: set()}
        for _ in range(200):
            p, a = domains.sample(d, rng)
            known = ("old fable" in p) or ("old rhyme" in p) or ("staryj stih" in p)
            sizes[known].add(a.count(".") if d == "creative-en" else a.count("\n") + 1)
        expected = domains.STORY_EVENTS + 2 if d == "creative-en" else 4 * domains.POEM_STANZAS
        assert sizes[True] == sizes[False] == {expected}, (d, sizes)


def test_mixed_domains_tell_a_new_story_or_an_old_tale_of_the_same_length():
    """Every prompt of a mixed domain asks for a story after its determined answer: a new one in
    REMARK_SHARE of them, else one of KNOWN_TEXTS old tales, each REMARK_EVENTS events long, so
    that length does not tell them apart; math and code-ru stay determined."""
    start = re.compile(f"(?:{'|'.join(domains._STORY_OPENERS)}), there (?:was|lived) ")
    for d in domains.REMARKED:
        rng = domains.domain_rng(0, d, "test")
        told = {True: [], False: []}
        for _ in range(400):
            p, a = domains.sample(d, rng)
            story = a[list(start.finditer(a))[-1].start() :]
            assert story.count(".") == domains.REMARK_EVENTS + 2, (d, story)  # opener, events, ending
            told["old tale" in p or "staruju skazku" in p].append(story)
        assert abs(len(told[False]) / 400 - domains.REMARK_SHARE) < 0.1, d
        assert len(set(told[True])) == domains.KNOWN_TEXTS and len(set(told[False])) == len(told[False]), d
    for d in ("math", "code-ru"):
        assert domains.UNCERTAINTY[d] == "determined" and d not in domains.REMARKED


def test_code_uses_local_stdlib():
    funcs = code.stdlib_functions()
    assert len(funcs) > 50 and list(funcs) == sorted(funcs)
    _, ans = domains.sample("code", random.Random(0))
    assert ans.startswith("def ")


@pytest.fixture(scope="module")
def world_tok(tmp_path_factory):
    from orthrus.world.tokenizer import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(vocab_size=384, seed=0).save_pretrained(str(d))
    return d


def test_tokenizer_roundtrip_and_chat_template(world_tok):
    from transformers import AutoTokenizer

    from orthrus.chat import render_chat

    tok = AutoTokenizer.from_pretrained(world_tok)
    assert len(tok) == 384
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    for d in domains.DOMAINS:
        p, a = domains.sample(d, random.Random(0))
        for text in (p, a):
            assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    # every digit a token of its own, as in Qwen3 (numbers are the same for any vocabulary size)
    assert [t for t in tok.tokenize("16 + 205") if any(c.isdigit() for c in t)] == ["1", "6", "2", "0", "5"]
    ids = render_chat(tok, "Compute 1 + 2.")
    text = tok.decode(ids)
    assert text == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nCompute 1 + 2.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    for t in ("<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        assert tok.convert_tokens_to_ids(t) in ids
    # thinking enabled: no empty think block
    msgs = [{"role": "user", "content": "x"}]
    assert not tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True).endswith("</think>\n\n")


def test_padded_vocab():
    from orthrus.world.teacher import padded_vocab

    assert padded_vocab(384) == 448 and padded_vocab(383) == 384 and padded_vocab(770) == 832


@pytest.fixture(scope="module")
def micro_teacher(tmp_path_factory):
    from orthrus.world.teacher import train_teacher

    d = tmp_path_factory.mktemp("teacher") / "t"
    summary = train_teacher(MICRO, d, verbose=False)
    return d, summary


def test_micro_teacher_saves_and_reloads(micro_teacher):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orthrus.chat import render_chat
    from orthrus.world.teacher import make_model  # noqa: F401  (import check)

    d, summary = micro_teacher
    for f in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "train_log.csv",
        "teacher_config.json",
    ):
        assert (d / f).exists(), f
    assert not list(d.parent.glob(".*tmp"))
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, use_safetensors=True)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    cfg = model.config
    assert cfg.vocab_size % 64 == 0 and cfg.vocab_size > len(tok)
    assert cfg.tie_word_embeddings
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    log = (d / "train_log.csv").read_text().splitlines()
    assert log[0] == "step,loss,lr,seconds" and len(log) == 1 + MICRO["steps"]

    # identical logits after a second reload
    ids = torch.tensor([render_chat(tok, "Compute 1 + 2. Show the steps.")])
    model2 = AutoModelForCausalLM.from_pretrained(d, use_safetensors=True)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model2(ids).logits)


def test_micro_teacher_deterministic(micro_teacher, tmp_path):
    from safetensors.torch import load_file

    from orthrus.world.teacher import train_teacher

    d, _ = micro_teacher
    train_teacher(MICRO, tmp_path / "again", verbose=False)
    a = load_file(d / "model.safetensors")
    b = load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    cfg = json.loads((tmp_path / "again" / "teacher_config.json").read_text())
    assert cfg["steps"] == MICRO["steps"]


def test_train_teacher_cli(tmp_path):
    import yaml

    from orthrus.world import teacher

    cfgfile = tmp_path / "cfg.yaml"
    cfgfile.write_text(yaml.safe_dump({"teacher": {**MICRO, "steps": 50}}))
    out = tmp_path / "cli"
    assert teacher.main(["--config", str(cfgfile), "--out", str(out), "--steps", "1", "--set", "seed=3"]) == 0
    cfg = json.loads((out / "teacher_config.json").read_text())
    assert cfg["steps"] == 1 and cfg["seed"] == 3 and cfg["hidden_size"] == 32
    with pytest.raises(ValueError, match=r"bad teacher settings: bogus: unknown key"):
        teacher.train_teacher({"bogus": 1}, tmp_path / "x", verbose=False)
    # the section's rules, as the config's: a warm-up (default 30) that never ends within the steps
    with pytest.raises(ValueError, match=r"warmup_steps: 30 is not below steps \(5\)"):
        teacher.main(["--out", str(tmp_path / "y"), "--steps", "5"])
    assert not (tmp_path / "y").exists()
