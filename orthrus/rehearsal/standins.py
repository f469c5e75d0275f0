"""Stand-ins for every hub artefact of `configs/paper.yaml`, so that its DAG runs for real on a CPU.

`orthrus rehearsal-standins --out DIR [--eval-file FILE] [--per-domain 2]` writes, in the formats
the paper run reads (nothing here is committed as a binary; `configs/rehearsal.yaml` points at
these paths, relative to the rehearsal's working directory, `workflow/scripts/rehearse.sh`):

- `Qwen3-1.7B/`, `Qwen3-0.6B/`: tiny random Qwen3-architecture causal LMs (`save_pretrained`,
  safetensors) with one byte-level tokenizer whose chat template takes `enable_thinking` (the tiny
  world's: `<|im_start|>`/`<|im_end|>`, `<think>` tokens); as Qwen3's, the config's EOS id is
  `<|im_end|>` and the generation config lists `<|im_end|>` and `<|endoftext|>` (so `eos: config`
  and `eos: generation_config` differ), and the embedding has rows past the tokenizer (the released
  checkpoints' mask id is one past its last id);
- `Orthrus-Qwen3-1.7B/`: an Orthrus checkpoint in the released format (`architectures: ["OrthrusLM"]`,
  `model_type: qwen3`, `block_size: 32`, `mask_token_id` one past the tokenizer);
- `ZaryaOrthrus-1.7B/`: the same with `model_type: orthrus` in its config.json, as a checkpoint
  published with its own model type;
- `ZaryaOrthrusDataset-1.7B/`: a hub-layout dataset directory (`data/train.jsonl`,
  `data/test.jsonl`, fields `prompt` / `response`), read by `corpus.source: hf` through
  `datasets.load_dataset` like the authors' dataset;
- `speed_evaluation_dataset.json`: the authors' evaluation file (`{domain: [prompt, ...]}`) cut to
  `--per-domain` prompts per domain, from `--eval-file` (default: the copy in
  `../shared/data/zarya-orthrus/` beside the checkout) or, where no copy is at hand, prompts written
  here in its format for its twelve domains;
- `lm_eval_tasks/`: lm-eval's own `gsm8k`, `ifeval` and `humaneval` task files (`include:`d, so
  their prompts, filters and metrics run) with `dataset_path: json` over a few local documents in
  each dataset's own fields;
- `nltk_data/`: an empty Punkt model in NLTK's `punkt_tab` layout (IFEval tokenizes sentences with
  it; the real data is a download), for `NLTK_DATA`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orthrus.errors import MissingInputError

SHARED_EVAL_FILE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "zarya-orthrus" / "speed_evaluation_dataset.json"
)
# the authors' twelve domains, for prompts written here when their file is not at hand
DOMAINS = (
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
    "wmt ru-en",
)

GSM8K = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "A box holds 12 eggs. How many eggs are in 2 boxes?", "answer": "12 * 2 = 24\n#### 24"},
    {"question": "Ann had 10 pens and gave away 6. How many are left?", "answer": "10 - 6 = 4\n#### 4"},
]
IFEVAL = [
    {
        "key": 1,
        "prompt": "Write two sentences about the sea. Do not use any commas.",
        "instruction_id_list": ["punctuation:no_comma"],
        "kwargs": [{}],
    },
    {
        "key": 2,
        "prompt": "Describe a cat in fewer than 40 words.",
        "instruction_id_list": ["length_constraints:number_words"],
        "kwargs": [{"relation": "less than", "num_words": 40}],
    },
    {
        "key": 3,
        "prompt": "Answer in lowercase letters only: what is the capital of France?",
        "instruction_id_list": ["change_case:english_lowercase"],
        "kwargs": [{}],
    },
]
HUMANEVAL = [
    {
        "task_id": "HumanEval/0",
        "prompt": 'def add(a, b):\n    """Return a + b."""\n',
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
        "entry_point": "add",
    },
    {
        "task_id": "HumanEval/1",
        "prompt": 'def double(x):\n    """Return 2 * x."""\n',
        "canonical_solution": "    return 2 * x\n",
        "test": "def check(candidate):\n    assert candidate(4) == 8\n",
        "entry_point": "double",
    },
]


def _write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def eval_prompts(eval_file, per_domain: int) -> tuple[dict, str]:
    """({domain: prompts} cut to `per_domain`, where they came from)."""
    path = Path(eval_file) if eval_file else SHARED_EVAL_FILE
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        return {d: list(p)[:per_domain] for d, p in data.items()}, str(path)
    if eval_file:
        raise MissingInputError(f"--eval-file {eval_file}: no such file")
    return (
        {
            d: [f"({d}) Prompt {i + 1}: write a short answer about the number {i + 3}." for i in range(per_domain)]
            for d in DOMAINS
        },
        "written here (the authors' file is not beside the checkout)",
    )


def _model(tok, layers: int, hidden: int, seed: int):
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    im_end, endoftext = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    vocab = -(-(len(tok) + 1) // 64) * 64  # rows past the tokenizer, as Qwen3's embedding has
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=0.2,
        eos_token_id=im_end,
        bos_token_id=endoftext,
        pad_token_id=endoftext,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[im_end, endoftext], pad_token_id=endoftext, bos_token_id=endoftext
    )
    return model


def build(out, eval_file=None, per_domain: int = 2, seed: int = 0) -> dict:
    """Write every stand-in under `out` (see the module docstring); returns what came from where."""
    import lm_eval

    from orthrus.models.modeling import OrthrusForCausalLM
    from orthrus.world.tokenizer import train_tokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(vocab_size=512, seed=seed, n_per_domain=40)
    teacher = _model(tok, layers=2, hidden=64, seed=seed)
    for name, model in (("Qwen3-1.7B", teacher), ("Qwen3-0.6B", _model(tok, layers=1, hidden=32, seed=seed + 1))):
        model.save_pretrained(out / name)
        tok.save_pretrained(out / name)
    for name, model_type in (("Orthrus-Qwen3-1.7B", "qwen3"), ("ZaryaOrthrus-1.7B", "orthrus")):
        orthrus = OrthrusForCausalLM.from_base(teacher, block_size=32, mask_token_id=len(tok))
        orthrus.save_pretrained(out / name)
        tok.save_pretrained(out / name)
        cfg_path = out / name / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["model_type"] = model_type
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    prompts, source = eval_prompts(eval_file, per_domain)
    (out / "speed_evaluation_dataset.json").write_text(
        json.dumps(prompts, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    records = [{"prompt": p, "response": f"A short answer to: {p[:60]}"} for ps in prompts.values() for p in ps]
    corpus = out / "ZaryaOrthrusDataset-1.7B" / "data"
    _write_jsonl(corpus / "train.jsonl", records)
    _write_jsonl(corpus / "test.jsonl", records[:4])

    tasks = out / "lm_eval_tasks"
    builtin = Path(lm_eval.__file__).parent / "tasks"
    for task, docs, split in (("gsm8k", GSM8K, "test"), ("ifeval", IFEVAL, "train"), ("humaneval", HUMANEVAL, "test")):
        data = (tasks / f"{task}.jsonl").resolve()
        _write_jsonl(data, docs)
        files = {split: str(data)} | ({"train": str(data)} if task == "gsm8k" else {})
        (tasks / f"{task}.yaml").write_text(
            f"# lm-eval's own {task} task over local documents in its dataset's fields (the hub is out of reach)\n"
            f"include: {builtin / task / (task + '.yaml')}\n"
            f"task: {task}\ndataset_path: json\ndataset_name: null\n"
            f"dataset_kwargs:\n  data_files: {json.dumps(files)}\n",
            encoding="utf-8",
        )
    punkt = out / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    punkt.mkdir(parents=True, exist_ok=True)
    for f in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (punkt / f).write_text("")
    return {"out": str(out), "eval_prompts": source, "per_domain": per_domain, "tokenizer_size": len(tok)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus rehearsal-standins", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the stand-ins (configs/rehearsal.yaml: standins/)")
    ap.add_argument("--eval-file", help=f"the authors' evaluation file (default: {SHARED_EVAL_FILE}, if present)")
    ap.add_argument("--per-domain", type=int, default=2, help="evaluation prompts kept per domain")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    info = build(args.out, args.eval_file, args.per_domain, args.seed)
    print(
        f"[rehearsal] stand-ins in {info['out']}; evaluation prompts ({info['per_domain']} per domain): "
        f"{info['eval_prompts']}",
        file=sys.stderr,
    )
    return 0
