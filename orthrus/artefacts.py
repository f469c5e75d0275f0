"""The catalogue of every artefact the study writes: its path, the command that writes it, its columns
(orthrus/contracts.py's lists) and what it holds; docs/DESIGN.md's artefact section is rendered from it
(`python -m orthrus.artefacts --design docs/DESIGN.md [--check]` writes or checks it). Pure Python, as
contracts is."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

from orthrus.contracts import (
    BENCHMARK_FIGURE,
    BENCHMARK_TABLES,
    CLAIMS_TABLES,
    CORPUS_COLUMNS,
    DECODE_COLUMNS,
    FIGURE_FORMATS,
    FIGURES,
    FORENSICS_COLUMNS,
    FRONTIER_COLUMNS,
    FRONTIER_FIGURE,
    FRONTIER_TABLES,
    PPL_COLUMNS,
    PROMPT_COLUMNS,
    SAMPLING_ENGINE_TABLES,
    SAMPLING_FIGURE,
    SAMPLING_TABLES,
    SAMPLING_TEST_ROWS,
    SAMPLING_TV_ROWS,
    TABLES,
    TRAIN_EVAL_COLUMNS,
    TRAIN_LOG_COLUMNS,
)
from orthrus.engines.formats import EXPORT_FIELDS, EXTERNAL_FIELDS, SAMPLED_EXPORT_FIELDS, SAMPLED_FIELDS

# what a table's columns mean, where its column names do not say it
TABLE_NOTES = {
    "trajectories.parquet": "`reference` names the trajectory each row is compared with: the reference model's "
    "`ar-ref` at the row's precision and attention, or, for an external decoder whose "
    "decode.external entry declares `reference: NAME` (an engine's own plain run), that "
    "file's; every match table of the configuration is then against it.",
    "decoders.csv": "`oracle_match_rate` is the oracle control's match rate at the same precision and attention "
    "(the verify shape's numerics alone), `batch_match_rate` the ar-batched control's (the reference's "
    "noise floor in batches); the verdict counts are the first divergences' (`n_no_verdict`: no "
    "forensics row or no verdict); `audit` is `exact`, `numerics` (every divergence a tie or "
    "rounding; for a speculative decoder `, within its oracle` when its match rate's CI reaches the "
    "oracle's), `not lossless` (a structural divergence) or `unexplained` (divergences without a "
    "verdict).",
    "speed.csv": "One row per decoding cell: `tokens_per_second` its generated tokens over its decoding seconds "
    "(the loop's own clock, model loading left out), `ar_tokens_per_second` the AR reference's (`ar-ref`) at the "
    "same precision and attention over the same `n` prompts, `speedup` their ratio. Cells run as separate jobs, "
    "so cells that shared a device at once time each other too (exactness_cost.csv times side by side).",
    "engine_widths.csv": "One row per engine run that speculated (its engine record's `speculative`, 'METHOD k=K'): "
    "`k` its "
    "draft width, the match rate against its `reference` (Wilson CI), `n_diverged` its diverging prompts, "
    "`first_divergence_median` and `first_divergence_min` the token position of their first divergence, "
    "`tpf_verify` its mean tokens per verifying forward. A width sweep is the rows sharing `reference` and "
    "`method`.",
    "load.csv": "One row per server run of the OpenAI engine (`model` its entry NAME-cC): `concurrency` the requests "
    "kept in flight, `slots` the server's parallel slots, `planted` whether the planted proxy stood in front of it, "
    "`server` the launch (llamacpp, vllm) or command or url; the match rate against its `reference` (the same "
    "server at concurrency 1 for a run under load), its diverging prompts, the median position of their first "
    "divergence and each divergence's verdict; `distinct_mean` and `distinct_max` the distinct completions per "
    "prompt over its `repeats` passes at that concurrency, `frac_varying` the share of prompts with more than one; "
    "where both runs give the server's own log-probabilities, `logprob_moved_max` the largest change load made to "
    "an emitted token's (at the positions before each prompt's first divergence, the tokens the same) and "
    "`frac_logprob_moved` the share of those positions where it changed at all.",
    "ppl_logit.csv": "`beta1` is the log-PPL coefficient of the logit `match ~ log(ppl) + length + C(domain)` "
    "(`length` the reference response's tokens; domains with a constant outcome dropped), with its "
    "95% CI and p-value; NaN where it cannot be estimated, and `note` says why. `beta0` is the "
    "intercept, `curve_intercept` is `beta0` plus the length and domain terms averaged over the "
    "fitted rows (the mean linear predictor minus `beta1` times the mean log PPL): "
    "`sigmoid(curve_intercept + beta1 * log(ppl))`, the model's P(match) at the fitted rows' mean "
    "length and domain mix, is the curve `orthrus figures` draws in `match_vs_ppl`. `fit` names the estimator: "
    "`mle` the plain maximum-likelihood fit (Wald CI and p-value), `firth` Firth's penalised fit where the plain one "
    "separates or does not converge (profile penalised-likelihood CI, penalised likelihood-ratio p-value; "
    "`note` says why), empty where none was estimated.",
    "exactness_cost.csv": "One row per setting that could restore the AR trajectory (each precision and attention "
    "kernel, and the base cell with the guarded verify at each TAU, `verify_guard`), measured "
    "side by side on the same few prompts per domain: `match_rate` against the model's own AR "
    "view in the same cell (Wilson CI), `tpf_verify` tokens per prefill and verify forward, "
    "`seconds_per_token` the loop's wall time and `time_vs_base` the median over the prompts of "
    "its ratio to the unguarded base loop's on the same prompt; `exact`: every prompt matched; `cheapest_exact`: the exact setting with the "
    "lowest time.",
    "sampling_tv.csv": "One row per cell of the sampling audit (loop, precision, attention, temperature, `top_p` "
    "1 for none): along `n_trajectories` reference trajectories sampled from the model's AR view "
    "and teacher-forced through the loop's verify blocks, the total variation between each "
    "speculative row's exact output distribution and the single-step distribution: its mean, "
    "99th percentile and maximum over `n_positions`; `seq_bound` the mean over trajectories of "
    "the sum of their TVs (capped at 1: the chain-rule bound on the sequence TV), "
    "`bound_at_length` the mean TV times `length` (a response of the study's length). "
    "`orthrus-lossy` is the planted control (q at temperature 1 in the ratio; at temperature 1 it "
    "is the honest loop).",
    "sampling_two_sample.csv": "One row per (loop, prompt) of the empirical test: `n_samples` samples of the first "
    "`m` tokens from the loop and as many from plain AR sampling; `p_first` the chi-square "
    "test on the first token, `p_min_position` the smallest over the m positions, "
    "`p_prefix` on the m-token prefix (these three describe); `p_value` the stratified "
    "chi-square (each token against the other arm's given the same earlier tokens); `rejected` by Holm over the loop's `n_prompts` prompts at family-wise "
    "`alpha` (`n_rejected` of them; `n_below_alpha` uncorrected). `p_known` the known-probability test "
    "(the loop's samples against the AR model's own probabilities, orthrus/audit/known_p.py), "
    "`rejected_known` by Holm likewise (`n_rejected_known`); `planned_power` that test's power against the "
    "planted control at the prompt's `n_samples`, planned before sampling.",
    "sampling_engines.csv": "One row per (engine pair, prompt) of sampling.engines: the sampled file of `engine` "
    "against its `reference`'s (the same engine plain), `n_samples` samples of the first `m` tokens each, "
    "from the seeds `engine_seed` and `reference_seed`; `patches` the engine functions corrected for "
    "`engine`'s run (orthrus/engines/vllm_patches.py; `none` as shipped); `p_first` and `p_prefix` "
    "describe, `p_value` is the "
    "stratified chi-square of the in-process test; `rejected` by Holm over the pair's `n_prompts` prompts at "
    "family-wise `alpha`.",
    "claims.csv": "One row per claim of the study and subject (a decoding configuration, a benchmark task): "
    "`statistic` (`statistic_name`) with its interval `ci_low`/`ci_high`, read from or computed once "
    "from the table `source`; `test`, `threshold`, `p_value` where the test has one; `verdict` "
    "holds, fails, untestable or underpowered (the config's power plan, `analysis.power`), and `reason` "
    "says why (e.g. too few divergences). "
    "`n_errors_excluded`: the decoding error rows its source rows left out. The claims are "
    "listed in `orthrus/report/claims/`; `orthrus compare-runs` compares two runs' verdicts.",
}


class Artefact(NamedTuple):
    path: str
    producer: str
    columns: list
    about: str


def _list(cols) -> str:
    return ", ".join(f"`{c}`" for c in cols)


ARTEFACTS = {
    "Prompt sets": Artefact(
        "results/prompts/{eval,distill}.parquet",
        "orthrus prompts",
        PROMPT_COLUMNS,
        "`prompt` is the raw user text; whoever tokenizes applies the chat template "
        "(`orthrus.chat.render_chat`). Every reader goes through `orthrus.data.prompt_set.read_prompt_set` (UTF-8, no "
        "null or empty value, unique ids; errors name file, row id and column).",
    ),
    "Teacher corpus shard": Artefact(
        "results/corpus/shard_{i}-of-{n}.parquet (+ .sha256)",
        "orthrus corpus",
        CORPUS_COLUMNS,
        "`prompt_ids` are the chat-rendered prompt tokens, `response_ids` the greedy response (EOS included when "
        "reached); `finish_reason` is eos, length or error (a prompt too long for the teacher, or a dataset record "
        "without prompt or response: no tokens, skipped and counted by training). The `.sha256` sidecar is the "
        "content hash training fingerprints read.",
    ),
    "Model folder": Artefact(
        "results/teacher, results/draft, results/models/{model}",
        "orthrus train-teacher / orthrus train",
        [],
        "A Hugging Face model folder (config.json, model.safetensors, tokenizer files; never pickles) plus, for "
        f"an Orthrus variant, `train_log.csv` ({_list(TRAIN_LOG_COLUMNS)}), `eval_log.csv` "
        f"({_list(TRAIN_EVAL_COLUMNS)}: held-out tokens per forward through the real decoding loop) and "
        "`train_summary.json`; the teacher has `train_log.csv` and `teacher_eval.json`.",
    ),
    "Decoding result": Artefact(
        "results/decode/{model}/{decoder}-{precision}-{attention}.parquet",
        "orthrus decode",
        DECODE_COLUMNS,
        "One row per prompt. `tokens` is the response (list<int>); `accepted` the accepted draft tokens per verify "
        "step (empty for plain AR); `n_diffusion` counts the proposer's forwards (Orthrus's diffusion view, "
        "assisted's draft model), `n_verify` the model's other forwards; `finish_reason` is eos, length or error "
        "(`error` says why); `env` is a JSON record of the numerical environment (dtype, attention, TF32, "
        "library versions, device) and the run's protocol (message format, max_new_tokens, loop options). An engine's "
        "file (decoder `external`, model its decode.external name) comes in through `orthrus ingest`: "
        "`results/decode/{name}/external-{precision}-{attention}.parquet`, its `env` the record's under "
        "`engine_env`.",
    ),
    "Exported prompts": Artefact(
        "results/export/prompts.jsonl",
        "orthrus export-prompts",
        EXPORT_FIELDS,
        "The evaluation set as an engine outside this package needs it, one JSON object per line and prompt: "
        "`prompt` the raw user text, `messages` its chat messages, `prompt_text` the chat-rendered text and "
        "`prompt_token_ids` its tokens under the study's message format (`orthrus.chat.render_chat`; feed the ids, "
        "not the text), and the generation settings of the study: greedy (`temperature` 0), `max_new_tokens`, "
        "`stop_token_ids` (the teacher's generation-config EOS ids, where transformers' generate stops) and the "
        "`message` format. docs/EXTERNAL.md runs it through vLLM and SGLang.",
    ),
    "External trajectory file": Artefact(
        "decode.external.{name}.path (JSONL)",
        "an engine (docs/EXTERNAL.md)",
        EXTERNAL_FIELDS,
        "One JSON object per line and prompt; `orthrus ingest` reads it into the decoding result "
        "`results/decode/{name}/external-{precision}-{attention}.parquet`. Required: `prompt_id` (one of the "
        "exported prompts', each once), `token_ids` (the generated ids, the stop id included when reached) and `env` "
        "(an object: `engine`, and where known `version`, `dtype`, `kernel`, `batch_size`, `device`). Optional: "
        "`text` (checked against the tokens), `finish_reason` (`stop`/`eos`, `length`; anything else is an error "
        "row), `prompt_token_ids` (checked against the study's), `accepted` (accepted draft tokens per verify step), "
        "`forwards` (the target model's forwards, prefill included; with `accepted`, gives tokens per forward), "
        "`draft_forwards`, `seconds`, `settings` (the export's `max_new_tokens`, `stop_token_ids`, `message` and "
        "`temperature`, echoed: each must be the study's), `logprobs` (the engine's own top-2 log-probabilities at "
        "every generated position, [[id, logprob], [id, logprob]] in rank order: with them a divergence's verdict "
        "asks whether the engine emitted its own argmax and by what margin), `extra` (anything else, kept in `env`; the OpenAI engine's: `completions`, every repeat's tokens at the run's concurrency, and `in_flight`, the requests in flight when each repeat's request started). A bad record "
        "fails naming the file, the line and the field; so does a file decoded with another token budget "
        "(`finish_reason` `length` before `max_new_tokens`, or records ending early without a stop id in bulk); a "
        "prompt without a record becomes an error row (counted in every table's `n_errors_excluded`).",
    ),
    "Sampled export": Artefact(
        "results/export/sampled.jsonl",
        "orthrus export-prompts --sampling",
        SAMPLED_EXPORT_FIELDS,
        "The prompts of sampling.two_sample as an engine samples them, one JSON object per line: an exported "
        "prompt's fields, with the test's `temperature`, `top_p` and `top_k` (null: none), `n_samples` (N) and "
        "`max_new_tokens` (its m).",
    ),
    "Sampled engine file": Artefact(
        "sampling.engines.{name}.path (JSONL)",
        "an engine, or the transformers stand-in engine on the sampled export",
        SAMPLED_FIELDS,
        "One JSON object per line and prompt of the sampled export; `orthrus engine-samples` tests it against "
        "its entry's `reference`. `samples`: the export's `n_samples` lists of generated ids, each of "
        "`max_new_tokens` ids or ending at a stop id; `env`: `engine`, the `seed` the prompt was sampled with "
        "(an integer; a pair's two files must differ in it) and the sampling settings `temperature`, `top_p`, "
        "`top_k` (each the export's), beside anything else the engine states; `extra` is free.",
    ),
    "Perplexity file": Artefact(
        "results/ppl/reference.parquet",
        "orthrus perplexity",
        PPL_COLUMNS,
        "One row per reference (`ar-ref`) trajectory, and per trajectory of an engine's plain run that another "
        "external file names as its `reference` (`model` its name), scored by the teacher at `scorer_precision`: "
        "`ppl` of the response, `entropy` the mean next-token entropy (nats), `margins` the top-1/top-2 logit margin at every "
        "response step (list<float>).",
    ),
    "Forensics file": Artefact(
        "results/forensics/{model}.parquet, results/forensics/external/{name}.parquet",
        "orthrus forensics",
        FORENSICS_COLUMNS,
        "One row per diverging trajectory, at its first divergence: the reference's margin in the decoding "
        "precision and in fp32, the verify step's margin, the first layer whose hidden state differs, whether "
        "replaying the run reproduces the divergence, the logits of the reference's token (`_ref`) and the "
        "decoder's (`_dec`) in the reference's step and the decoder's own pass, whether the decoder's token is its "
        "own pass's argmax, the reference's gap between the two in ulps of the precision, and the `verdict` "
        "(tie, rounding, structural; `orthrus.audit.verdict`) with a note saying why (or why none could be given). An "
        "engine's file (decoder `external`) is scored by the in-process teacher alone: its own pass cannot be "
        "recomputed, so the verify columns are empty and the verdict rests on the reference's gap "
        "(`orthrus.audit.verdict.external_verdict`: a tie or a rounding, else none).",
    ),
    "Benchmark record": Artefact(
        "results/benchmarks/{model}/{decoder}-{precision}-{attention}.json",
        "orthrus lm-eval run",
        [],
        "lm-evaluation-harness's results and per-sample records, with the run's settings, the numerical "
        "environment and library versions; task files for the tiny tasks are in results/benchmarks/tasks/.",
    ),
}
ARTEFACTS.update(
    {
        f"Table `{name}`": Artefact(
            f"results/tables/{name}",
            "orthrus analyze",
            cols,
            " ".join(
                [
                    "Parquet." if name.endswith(".parquet") else "CSV with a Markdown twin.",
                    *([TABLE_NOTES[name]] if name in TABLE_NOTES else []),
                ]
            ),
        )
        for name, cols in TABLES.items()
    }
)
ARTEFACTS.update(
    {
        f"Table `{name}`": Artefact(
            f"results/tables/{name}", "orthrus lm-eval table", cols, "CSV with a Markdown twin."
        )
        for name, cols in BENCHMARK_TABLES.items()
    }
)
ARTEFACTS["Frontier measurement"] = Artefact(
    "results/frontier/{model}.parquet",
    "orthrus frontier measure",
    FRONTIER_COLUMNS,
    "One row per (setting, prompt): the Orthrus loop's `tokens` in the setting (`precision`, `attention`, "
    "`verify_guard`), the model's own AR view's `ar_tokens` in the same cell, `match`, the forward counts, the "
    "loop's wall `seconds` (the settings interleaved prompt by prompt) and the cell's numerical `env`.",
)
ARTEFACTS.update(
    {
        f"Table `{name}`": Artefact(
            f"results/tables/{name}", "orthrus frontier table", cols, f"CSV with a Markdown twin. {TABLE_NOTES[name]}"
        )
        for name, cols in FRONTIER_TABLES.items()
    }
)
ARTEFACTS["Sampling measurement: total variation"] = Artefact(
    "results/sampling/{model}-tv.parquet",
    "orthrus sampling measure",
    SAMPLING_TV_ROWS,
    "One row per (cell, reference trajectory) with its per-position `tv` list and the cell's `env`.",
)
ARTEFACTS["Sampling measurement: two-sample test"] = Artefact(
    "results/sampling/{model}-two-sample.parquet",
    "orthrus sampling measure",
    SAMPLING_TEST_ROWS,
    "One row per (loop, prompt) of the two-sample test with its `samples`, the AR arm's `ar_samples` and the "
    "cell's `env`; `p_known` the known-probability test (orthrus/audit/known_p.py) and `planned_power` its "
    "power against the planted control at `n_samples`, planned before sampling.",
)
ARTEFACTS.update(
    {
        f"Table `{name}`": Artefact(
            f"results/tables/{name}", "orthrus sampling table", cols, f"CSV with a Markdown twin. {TABLE_NOTES[name]}"
        )
        for name, cols in SAMPLING_TABLES.items()
    }
)
ARTEFACTS.update(
    {
        f"Table `{name}`": Artefact(
            f"results/tables/{name}", "orthrus engine-samples", cols, f"CSV with a Markdown twin. {TABLE_NOTES[name]}"
        )
        for name, cols in SAMPLING_ENGINE_TABLES.items()
    }
)
ARTEFACTS.update(
    {
        f"Table `{name}`": Artefact(
            f"results/tables/{name}", "orthrus claims", cols, f"CSV with a Markdown twin. {TABLE_NOTES[name]}"
        )
        for name, cols in CLAIMS_TABLES.items()
    }
)


def design_section() -> str:
    """The artefact section of docs/DESIGN.md."""
    out = []
    for name, a in ARTEFACTS.items():
        columns = f" Columns: {_list(a.columns)}." if a.columns else ""
        out.append(f"### {name}\n\n{_wrap(f'`{a.path}`, written by `{a.producer}`.{columns} {a.about}')}\n")
    figures = "\n".join(_wrap(f"- `{n}`: {about}", "  ") for n, about in FIGURES.items())
    intro = (
        f"`results/figures/{{name}}.{{{','.join(FIGURE_FORMATS)}}}`, written by `orthrus figures` from the tables "
        f"(`{BENCHMARK_FIGURE}` by `orthrus lm-eval table`, `{FRONTIER_FIGURE}` by `orthrus frontier table`, "
        f"`{SAMPLING_FIGURE}` by `orthrus sampling table`):"
    )
    out.append(f"### Figures\n\n{_wrap(intro)}\n\n{figures}\n")
    return "\n".join(out)


def _wrap(text: str, indent: str = "") -> str:
    # prose lines a terminal shows whole (the docs' width), never breaking a `name` or a path
    return textwrap.fill(text, 110, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


BEGIN, END = "<!-- contracts:begin -->", "<!-- contracts:end -->"


def render_into(text: str) -> str:
    """`text` with the block between BEGIN and END replaced by `design_section()`."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{design_section()}{END}{rest.split(END, 1)[1]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m orthrus.artefacts", description="The artefact section of the design page."
    )
    ap.add_argument("--design", help="rewrite the contracts block of this page (default: print the section)")
    ap.add_argument("--check", action="store_true", help="with --design: fail if the page is out of date")
    args = ap.parse_args(argv)
    if not args.design:
        sys.stdout.write(design_section())
        return 0
    path = Path(args.design)
    text = path.read_text()
    new = render_into(text)
    if args.check:
        if new != text:
            sys.stderr.write(f"{path} is out of date: run python -m orthrus.artefacts --design {path}\n")
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
