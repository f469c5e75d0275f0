"""Downstream benchmarks through lm-evaluation-harness (Table 7): the `orthrus` lm-eval model.

The model (`--model orthrus`) is lm-eval's Hugging Face model class (`HFLM`) with our decoding:

- loading: `OrthrusForCausalLM.from_pretrained(pretrained, dtype=..., attn_implementation=...)`,
  handed to `HFLM` as a ready model; with `decoding=ar` a plain Qwen3 checkpoint (the teacher)
  is accepted too and decoded by the same AR loop;
- generation (`generate_until`): `orthrus.generate(model, ids, mode=decoding)`, one request at a
  time (batch size 1), greedy unless the task asks to sample. Generation stops at EOS or at
  `max_gen_toks`; the task's `until` stop strings are applied to the decoded text afterwards.
  That is the same text as stopping early (decoding is causal: later tokens never change
  earlier ones), and the token stream stays the trajectory study's (no re-prefill);
- log-likelihood requests: `HFLM`'s own code, i.e. the model's normal forward = the AR view;
- chat rendering (when lm-eval applies a chat template, `--apply_chat_template`, the default of
  `orthrus lm-eval run`): exactly `orthrus.chat.render_chat`: an empty system message
  (`system_message=` to change it), the user turn, the assistant turn opened, thinking
  disabled; a task's assistant prefix (`gen_prefix`) is appended verbatim after that. Contexts
  rendered this way are tokenized without added special tokens, as `render_chat` does.

Model arguments (`--model_args`): `pretrained=DIR|HUB_ID`, `decoding=orthrus|ar`,
`decoding=ar-ref` (lm-eval's own HFLM generation), `dtype=bf16|fp16|fp32` (or bfloat16/float16/float32; default fp32), `attn_implementation=eager|sdpa|...`
(alias `attention`), `block_size=K` (default: the checkpoint's), `device=cpu|cuda`,
`system_message=`, `enable_thinking=False`, `max_gen_toks=N` (default when a task sets none),
`seed=N` (sampling only), `deterministic=True`, and `HFLM`'s `batch_size` (log-likelihood only).

Command line (`orthrus lm-eval <sub>` or `python -m orthrus.lmeval <sub>`):

    prepare-data --out DIR [--n 40] [--seed 0] [--tasks tiny_arith,tiny_gec,tiny_qa,tiny_code,tiny_translate]
                 [--exclude PROMPTS.parquet ...]
    run   --model-path DIR --decoding orthrus|ar --precision bf16|fp16|fp32 --attention eager|sdpa
          --tasks T1,T2 [--include-path DIR ...] [--limit N] [--max-gen-toks 128|task]
          [--num-fewshot 0] [--no-chat-template] [--no-chat-template-tasks T,...]
          [--model-name NAME] [--device cpu|cuda]
          [--allow-code-eval] --out results/benchmarks/{model}-{decoder}-{precision}-{attention}.json
    table --inputs A.json B.json ... --out results/tables/benchmarks.csv
          [--agreement-out results/tables/benchmarks_agreement.csv] [--figure results/figures/benchmarks]
    cli   [lm-eval's own arguments]     # lm-eval's CLI with the `orthrus` model registered, e.g.
          cli run --model orthrus --model_args pretrained=DIR,decoding=orthrus,dtype=bf16
              --tasks gsm8k --num_fewshot 0 --apply_chat_template --gen_kwargs max_gen_toks=128

Paper configuration: lm-eval's built-in `gsm8k` (metric `exact_match,flexible-extract`),
`humaneval` (`pass@1,create_test`) and `ifeval` (`prompt_level_loose_acc,none`,
`prompt_level_strict_acc,none`). Their datasets come from the hub (openai/gsm8k,
openai/openai_humaneval, google/IFEval); on an offline cluster fill the `datasets` cache once
on a connected machine (same `HF_HOME`/`HF_DATASETS_CACHE`) and run with `HF_HUB_OFFLINE=1`
(and `HF_DATASETS_OFFLINE=1`). IFEval needs the packages `langdetect`, `immutabledict` and
`nltk` with its `punkt_tab` data (`python -m nltk.downloader punkt_tab`, or set `NLTK_DATA`).
HumanEval executes model-written code: `run` refuses unless it gets `--allow-code-eval` and the
environment has `HF_ALLOW_CODE_EVAL=1`. lm-eval's `humaneval` is a plain completion prompt
(the function header); with the chat template use its chat variant `humaneval_instruct` (an
assistant prefix opens a code block), or keep `humaneval` with `--no-chat-template-tasks
humaneval`.

Modules: `lm` (the model; importing it registers `orthrus` with lm-eval, and this package
imports it), `tasks` (task index, primary metrics, safety checks), `run` (`evaluate`: one run
and its JSON record), `tables` (benchmark and agreement tables), `cli` (the command line). The
figure is `orthrus.figures.fig_benchmarks`.
"""
from orthrus.lmeval.lm import DECODINGS, OrthrusLM, load_model
from orthrus.lmeval.tasks import (
    PRIMARY_METRICS,
    BenchmarkError,
    check_code_eval,
    check_ifeval,
    check_tasks,
    expand_tasks,
    task_manager,
    unsafe_tasks,
)
from orthrus.lmeval.run import evaluate
from orthrus.lmeval.tables import agreement_rows, load_records, make_tables, result_rows
from orthrus.lmeval.cli import build_parser, main

__all__ = [
    "DECODINGS", "OrthrusLM", "load_model",
    "PRIMARY_METRICS", "BenchmarkError", "check_code_eval", "check_ifeval", "check_tasks", "expand_tasks",
    "task_manager", "unsafe_tasks",
    "evaluate",
    "agreement_rows", "load_records", "make_tables", "result_rows",
    "build_parser", "main",
]
