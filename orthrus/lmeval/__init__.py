"""Downstream benchmarks through lm-evaluation-harness (Table 7): the `orthrus` lm-eval model.

The model (`--model orthrus`) is lm-eval's Hugging Face model class (`HFLM`) with our decoding:

- loading: `OrthrusForCausalLM.from_pretrained(pretrained, dtype=..., attn_implementation=...)`,
  handed to `HFLM` as a ready model; with `decoding=ar` a plain Qwen3 checkpoint (the teacher)
  is accepted too and decoded by the same AR loop;
- generation (`generate_until`): `orthrus.generate(model, ids, options)` with the run's
  `DecodeOptions` (the decode stage's: eos policy, last block, prefill logits, determinism, block
  size; `--options` JSON from the workflow), only the token budget (`max_gen_toks`) and a task's
  sampling taken from the request; one request at a time (batch size 1). Generation stops at
  the options' EOS ids, at `max_gen_toks`, or as soon as the decoded text holds one of the task's
  `until` stop strings (a loop trace, as transformers' stopping criteria do); the text is then
  cut at the stop string. The tokens up to the stop are those of a full-length run (decoding is
  causal), and the token stream stays the trajectory study's (no re-prefill). With `eos:
  config` the loop stops on `config.eos_token_id` only, as the released loop does: where the
  generation config lists a second id (Qwen3's `<|endoftext|>` beside `<|im_end|>`), decoding
  goes on past it and the answer text holds what follows it (special tokens are skipped when the
  text is decoded), up to a stop string or `max_gen_toks`;
- log-likelihood requests: `HFLM`'s own code, i.e. the model's normal forward = the AR view;
- chat rendering (when lm-eval applies a chat template, `--apply_chat_template`, the default of
  `orthrus lm-eval run`): exactly `orthrus.chat.render_chat` with the options' message format
  (default: an empty system message), the user turn, the assistant turn opened, thinking
  disabled; a task's assistant prefix (`gen_prefix`) is appended verbatim after that. Contexts
  rendered this way are tokenized without added special tokens, as `render_chat` does.

Model arguments (`--model_args`): `pretrained=DIR|HUB_ID`, `options` (a `DecodeOptions` or its JSON:
from Python or `orthrus lm-eval run --options`, since `--model_args` splits on commas), and on top of it `decoding=orthrus|ar`, `decoding=ar-ref` (lm-eval's own HFLM generation),
`dtype=bf16|fp16|fp32` (or bfloat16/float16/float32), `attn_implementation=eager|sdpa|...` (alias
`attention`), `block_size=K` (default: the checkpoint's), `eos=`, `last_block=`,
`prefill_logits=`, `deterministic=`, `message=`; `device=cpu|cuda`, `enable_thinking=False`,
`max_gen_toks=N` (default when a task sets none), `seed=N` (sampling only), and `HFLM`'s
`batch_size` (log-likelihood only).

Command line (`orthrus lm-eval <sub>` or `python -m orthrus.lmeval <sub>`):

    prepare-data --out DIR [--n 40] [--seed 0] [--tasks tiny_arith,tiny_gec,tiny_qa,tiny_code,tiny_translate]
                 [--exclude PROMPTS.parquet ...]
    run   --model-path DIR [--options JSON] [--decoding orthrus|ar|ar-ref] [--precision P] [--attention A]
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
figure is `orthrus.report.figures.fig_benchmarks`.
"""

from orthrus.contracts import PRIMARY_METRICS
from orthrus.lmeval.cli import build_parser, main
from orthrus.lmeval.lm import DECODINGS, OrthrusLM, load_model
from orthrus.lmeval.run import evaluate
from orthrus.lmeval.tables import agreement_rows, load_records, make_tables, result_rows
from orthrus.lmeval.tasks import (
    BenchmarkError,
    check_code_eval,
    check_ifeval,
    check_tasks,
    expand_tasks,
    task_manager,
    unsafe_tasks,
)

__all__ = [
    "DECODINGS",
    "OrthrusLM",
    "load_model",
    "PRIMARY_METRICS",
    "BenchmarkError",
    "check_code_eval",
    "check_ifeval",
    "check_tasks",
    "expand_tasks",
    "task_manager",
    "unsafe_tasks",
    "evaluate",
    "agreement_rows",
    "load_records",
    "make_tables",
    "result_rows",
    "build_parser",
    "main",
]
