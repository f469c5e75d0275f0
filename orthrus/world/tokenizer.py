"""A small byte-level BPE for the tiny world, wrapped as a Qwen3-style chat tokenizer.

- byte-level BPE (GPT-2 style pre-tokenisation with every digit a token of its own, like Qwen3)
  trained with `tokenizers` on world text; vocabulary `vocab_size` (default 512) including the
  special tokens;
- special tokens `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos), plus the
  added (non-special) tokens `<think>` and `</think>` as in Qwen3;
- a Qwen3-like chat template: `<|im_start|>role\\n...<|im_end|>\\n` per message,
  `add_generation_prompt` opens the assistant turn and `enable_thinking=False` appends an
  empty `<think>\\n\\n</think>\\n\\n` block.

The result is a `transformers.PreTrainedTokenizerFast`; `save_pretrained(dir)` writes
plain files that `AutoTokenizer.from_pretrained(dir)` loads back without remote code.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]

# Qwen3's template reduced to what the study uses (no tools, no reasoning history).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


CORPUS_PER_DOMAIN = 300  # world samples per domain the tokenizer is trained on


def train_tokenizer(
    texts: Iterable[str] | None = None, vocab_size: int = 512, seed: int = 0, n_per_domain: int = CORPUS_PER_DOMAIN
):
    """Train the world BPE and return a `PreTrainedTokenizerFast`.

    `texts` defaults to `domains.corpus_text(n_per_domain, seed)`. Deterministic for the
    same texts (the `tokenizers` BPE trainer breaks ties deterministically).
    """
    from transformers import PreTrainedTokenizerFast

    if texts is None:
        from orthrus.world.domains import corpus_text

        texts = corpus_text(n_per_domain=n_per_domain, seed=seed)
    # the chat scaffolding, so role names become whole tokens
    texts = list(texts) + ["system\nuser\nassistant\n\n"] * 200
    n_added = len(THINK_TOKENS)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
        padding_side="left",
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tok.add_tokens(THINK_TOKENS, special_tokens=False)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok
