"""The names and columns of every artefact passed between the study's stages, defined once.

Pure Python with no heavy imports: the stages build their outputs from these lists, the
workflow (`workflow/rules/common.smk`) takes its table and figure files and wildcard
vocabularies from here, and orthrus/artefacts.py catalogues them for docs/DESIGN.md.
"""

from __future__ import annotations

from orthrus.decoders import names as decoder_names

# ---- vocabulary
# `tf32` is fp32 weights and activations with TF32 matrix products allowed (CUDA's
# allow_tf32, float32_matmul_precision "high"): a precision of its own because many users turn it on
# and it rounds a product's inputs to 10 mantissa bits on Ampere and later GPUs (orthrus/models/precision.py)
PRECISIONS = ("bf16", "fp16", "fp32", "tf32")
# sort key, most precise first (unknown precisions: len(PRECISION_RANK), last)
PRECISION_RANK = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
ATTENTIONS = ("eager", "sdpa", "flash_attention_2")
# the decoders and what each is (orthrus/decoders.py, the decoder table): the vocabularies below are its
# columns, so a stage asks the table, never a list of names
DECODERS = decoder_names()
REFERENCE_DECODER = decoder_names(role="reference")[0]
EXTERNAL_DECODER = decoder_names(runner="engine")[0]
# decoders that run a plain causal LM through transformers' generate()
HF_DECODERS = decoder_names(runner="generate")
# decoders that need no diffusion view and none of this package's loop: their model is any causal LM
# transformers loads without remote code (Llama, Mistral, Gemma, Qwen2/3, ...), and the loop's options
# do not apply to them; every other decoder runs `orthrus.generate` on a Qwen3 (or Orthrus) checkpoint
PLAIN_LM_DECODERS = HF_DECODERS + (EXTERNAL_DECODER,)
# the decoders under audit, and the controls that separate numerics from bugs (decode.controls)
SPECULATIVE = decoder_names(role="speculative")
CONTROLS = decoder_names(role="control")
# controls that run on the teacher (orthrus-lossy runs on each Orthrus model)
TEACHER_CONTROLS = decoder_names(role="control", model="teacher")
# this package's own loop (orthrus.decode.loop.generate), and the decoders that run on each Orthrus model
LOOP_DECODERS = decoder_names(runner="loop")
MODEL_DECODERS = decoder_names(model="orthrus")
# decoders compared against the reference trajectory
COMPARED_DECODERS = tuple(d for d in DECODERS if d != REFERENCE_DECODER)
# why a first divergence happened (orthrus.audit.verdict)
VERDICTS = ("tie", "rounding", "structural")
# the backbones' model_types this package builds Orthrus on and runs its loop on (`orthrus`: the
# authors' released format, a Qwen3 config); orthrus.models.modeling.FAMILIES maps each to its classes
ORTHRUS_FAMILIES = ("qwen3", "orthrus", "llama")
CONFIG = ["model", "decoder", "precision", "attention"]
# A name that becomes a path component and a wildcard (teacher, model, grid names): letters,
# digits, `_`, `.` and `-`, never first a `.` or `-` (so never `.`, `..`, a hidden file or an
# option). NAME_PATTERN is the config schema's (anchored; `(?![\s\S])` is the end of the string
# in Python and ECMA regexes alike: `$` would accept a trailing newline).
NAME = "[A-Za-z0-9_][A-Za-z0-9_.-]*"
NAME_PATTERN = f"^{NAME}(?![\\s\\S])"


def runs_model_code(task: str) -> bool:
    """Whether an lm-eval task (by name) executes model-written code: HumanEval and its variants.
    The workflow leaves such tasks out unless `benchmarks.allow_code_eval` opts in; `orthrus
    lm-eval run` also checks the tasks' own `unsafe_code` flag."""
    return "humaneval" in task


# ---- intermediate files
PROMPT_COLUMNS = ["prompt_id", "domain", "prompt"]
CORPUS_COLUMNS = [
    "prompt_id",
    "domain",
    "prompt",
    "response",
    "prompt_ids",
    "response_ids",
    "finish_reason",
    "error",
    "teacher",
    "dtype",
    "batch_size",
]
DECODE_COLUMNS = CONFIG + [
    "prompt_id",
    "domain",
    "prompt_len",
    "tokens",
    "accepted",
    "n_prefill",
    "n_diffusion",
    "n_verify",
    "seconds",
    "finish_reason",
    "error",
    "env",
]
PPL_COLUMNS = [
    "model",
    "precision",
    "attention",
    "prompt_id",
    "domain",
    "ppl",
    "entropy",
    "margins",
    "n_tokens",
    "scorer_precision",
]
FORENSICS_COLUMNS = CONFIG + [
    "prompt_id",
    "domain",
    "position",
    "ref_token",
    "orthrus_token",
    "margin_native",
    "margin_fp32",
    "verify_margin",
    "first_layer_diverging",
    "max_abs_hidden_diff",
    "replay_consistent",
    "ref_logit_ref",
    "ref_logit_dec",
    "verify_logit_ref",
    "verify_logit_dec",
    "verify_argmax",
    "gap_ulps",
    "verdict",
    "verdict_note",
]
TRAIN_LOG_COLUMNS = ["step", "loss", "lr", "tokens", "seconds", "loss_tokens", "ce", "kl", "acc", "grad_norm"]
TRAIN_EVAL_COLUMNS = ["step", "domain", "n", "tpf_verify", "tpf_all", "tpf_authors", "accepted_mean"]

# ---- tables (results/tables/): each CSV table has a Markdown twin and ends with ERRORS
ERRORS = "n_errors_excluded"
TRAJECTORY_COLUMNS = CONFIG + [
    "reference",
    "prompt_id",
    "domain",
    "match",
    "first_divergence",
    "common_prefix_len",
    "levenshtein",
    "n_tokens",
    "ref_n_tokens",
    "ppl",
]
MATCH_OVERALL_COLUMNS = CONFIG + ["n", "match_rate", "ci_low", "ci_high"]
MATCH_BY_DOMAIN_COLUMNS = CONFIG + ["domain", "n", "match_rate", "ci_low", "ci_high"]
# the run settings a TPF row comes from, read from each decoding row's `env` record (the Table 2 run
# of the paper config decodes 256 tokens with a user-only message)
TPF_RUN = ["message", "max_new_tokens"]
TPF_COLUMNS = (
    CONFIG
    + TPF_RUN
    + ["domain", "n", "tpf_verify", "tpf_verify_ci", "tpf_all", "tpf_all_ci", "tpf_authors", "tpf_authors_ci"]
)
PAIRWISE_COLUMNS = [f"a_{c}" for c in CONFIG] + [f"b_{c}" for c in CONFIG] + ["n", "match_rate"]
PPL_BY_MATCH_COLUMNS = CONFIG + ["matched", "n", "mean_ppl", "ci_low", "ci_high"]
PPL_LOGIT_COLUMNS = CONFIG + ["n", "beta1", "ci_low", "ci_high", "p_value", "note", "beta0", "curve_intercept", "fit"]
# the per-divergence verdict counts (orthrus.audit.verdict), in the forensics summary and decoders.csv
VERDICT_COUNTS = ["n_tie", "n_rounding", "n_structural", "n_no_verdict"]
DECODERS_COLUMNS = (
    [
        "precision",
        "attention",
        "decoder",
        "model",
        "n",
        "match_rate",
        "ci_low",
        "ci_high",
        "tpf_verify",
        "oracle_match_rate",
        "batch_match_rate",
    ]
    + VERDICT_COUNTS
    + ["audit"]
)
# the verify-width table (orthrus.analysis.widths): one row per external speculative configuration
ENGINE_WIDTH_COLUMNS = CONFIG + [
    "reference",
    "method",
    "k",
    "n",
    "match_rate",
    "ci_low",
    "ci_high",
    "n_diverged",
    "first_divergence_median",
    "first_divergence_min",
    "tpf_verify",
]
FORENSICS_SUMMARY_COLUMNS = (
    CONFIG
    + [
        "n_divergences",
        "median_margin_native",
        "median_margin_fp32",
        "near_tie_threshold",
        "frac_near_tie",
        "frac_exact_tie",
        "mode_first_layer",
        "max_gap_ulps",
        "rounding_ulps",
        "frac_within_ulps",
    ]
    + VERDICT_COUNTS
)
# the forensics rows the tables use (a subset of FORENSICS_COLUMNS)
FORENSICS_ROW_COLUMNS = CONFIG + [
    "prompt_id",
    "domain",
    "position",
    "margin_native",
    "margin_fp32",
    "first_layer_diverging",
    "gap_ulps",
    "verdict",
    "verdict_note",
]
UNCERTAINTY_COLUMNS = [
    "domain",
    "declared",
    "n_prompts",
    "n_steps",
    "mean_entropy",
    "near_tie_share",
    "near_ties_per_prompt",
    "near_tie_threshold",
    "scored_precision",
    "scored_attention",
]
# Orthrus against AR in tokens per second (orthrus.analysis.tpf.speed_table): one row per decoding cell
SPEED_COLUMNS = CONFIG + ["n", "tokens", "seconds", "tokens_per_second", "ar_tokens_per_second", "speedup"]
# the load table (orthrus.analysis.load_invariance): one row per server run of the OpenAI engine
LOAD_COLUMNS = (
    CONFIG
    + ["reference", "server", "method", "k", "concurrency", "slots", "planted"]
    + ["n", "match_rate", "ci_low", "ci_high", "n_diverged", "first_divergence_median"]
    + VERDICT_COUNTS
    + ["repeats", "distinct_mean", "distinct_max", "frac_varying", "logprob_moved_max", "frac_logprob_moved"]
)
# file -> columns; every `orthrus analyze` run writes exactly these files
TABLES = {
    "trajectories.parquet": TRAJECTORY_COLUMNS,
    "match_overall.csv": MATCH_OVERALL_COLUMNS + [ERRORS],
    "match_by_domain.csv": MATCH_BY_DOMAIN_COLUMNS + [ERRORS],
    "tpf_by_domain.csv": TPF_COLUMNS + [ERRORS],
    "pairwise_match.csv": PAIRWISE_COLUMNS + [ERRORS],
    "ppl_by_match.csv": PPL_BY_MATCH_COLUMNS + [ERRORS],
    "ppl_logit.csv": PPL_LOGIT_COLUMNS + [ERRORS],
    "forensics.csv": FORENSICS_SUMMARY_COLUMNS + [ERRORS],
    "forensics_rows.parquet": FORENSICS_ROW_COLUMNS,
    "uncertainty_by_domain.csv": UNCERTAINTY_COLUMNS + [ERRORS],
    "decoders.csv": DECODERS_COLUMNS + [ERRORS],
    "engine_widths.csv": ENGINE_WIDTH_COLUMNS + [ERRORS],
    "speed.csv": SPEED_COLUMNS + [ERRORS],
    "load.csv": LOAD_COLUMNS + [ERRORS],
}
# the metric each lm-eval task contributes to Table 7 (all metrics go into the tables; these are marked
# `primary` and drawn in the figure).
PRIMARY_METRICS = {
    "gsm8k": ["exact_match,flexible-extract"],
    "humaneval": ["pass@1,create_test"],
    "humaneval_instruct": ["pass@1,create_test"],
    "ifeval": ["prompt_level_loose_acc,none", "prompt_level_strict_acc,none"],
    "tiny_arith": ["exact_match,flexible-extract"],
    "tiny_gec": ["exact_match,none"],
    "tiny_qa": ["acc,none"],
    "tiny_code": ["exact_match,none"],
    "tiny_translate": ["chrf,none"],
}
# the benchmark tables (`orthrus lm-eval table`)
BENCHMARK_COLUMNS = ["model", "decoder", "precision", "attention", "task", "metric", "value", "stderr", "n", "primary"]
BENCHMARK_AGREEMENT_COLUMNS = [
    "model",
    "decoder",
    "reference_model",
    "reference_decoder",
    "precision",
    "attention",
    "task",
    "metric",
    "n",
    "n_responses_differ",
    "n_answers_differ",
    "value",
    "reference_value",
    "score_diff",
    "stderr",
    "reference_stderr",
    "combined_stderr",
    "paired_diff",
    "paired_stderr",
    "within_stderr",
]
BENCHMARK_TABLES = {"benchmarks.csv": BENCHMARK_COLUMNS, "benchmarks_agreement.csv": BENCHMARK_AGREEMENT_COLUMNS}
# the claims table (`orthrus claims`, from the tables above): one row per claim and subject
# `underpowered`: the config planned too little power for the claim (orthrus/report/claims/power.py)
CLAIM_VERDICTS = ("holds", "fails", "untestable", "underpowered")
CLAIMS_COLUMNS = [
    "claim",
    "subject",
    "description",
    "source",
    "statistic_name",
    "statistic",
    "ci_low",
    "ci_high",
    "n",
    "test",
    "threshold",
    "p_value",
    "verdict",
    "reason",
    ERRORS,
]
CLAIMS_TABLES = {"claims.csv": CLAIMS_COLUMNS}
# the price of exactness (`orthrus frontier`): one row per (setting, prompt), then one per setting
FRONTIER_COLUMNS = [
    "model",
    "precision",
    "attention",
    "verify_guard",
    "prompt_id",
    "domain",
    "tokens",
    "ar_tokens",
    "match",
    "n_prefill",
    "n_verify",
    "n_diffusion",
    "seconds",
    "env",
]
EXACTNESS_COST_COLUMNS = [
    "model",
    "precision",
    "attention",
    "verify_guard",
    "n",
    "n_match",
    "match_rate",
    "ci_low",
    "ci_high",
    "tpf_verify",
    "seconds_per_token",
    "time_vs_base",
    "exact",
    "cheapest_exact",
]
FRONTIER_TABLES = {"exactness_cost.csv": EXACTNESS_COST_COLUMNS + [ERRORS]}
FRONTIER_FIGURE = "exactness_cost"
# lossless in distribution (`orthrus sampling`, orthrus/audit/sampling.py): per (cell, reference trajectory)
# the per-position TVs, per (loop, prompt) the two-sample test, then one row per cell and per (loop, prompt)
SAMPLING_CELL = ["model", "decoder", "precision", "attention", "temperature", "top_p"]
SAMPLING_TV_ROWS = SAMPLING_CELL + ["prompt_id", "domain", "n_tokens", "tv", "env"]
SAMPLING_TEST_ROWS = SAMPLING_CELL + [
    "prompt_id",
    "domain",
    "n_samples",
    "m",
    "p_positions",
    "p_prefix",
    "p_value",
    "p_known",
    "planned_power",
    "samples",
    "ar_samples",
    "seconds",
    "env",
]
SAMPLING_TV_COLUMNS = SAMPLING_CELL + [
    "length",
    "n_trajectories",
    "n_positions",
    "tv_mean",
    "tv_p99",
    "tv_max",
    "seq_bound",
    "bound_at_length",
]
TWO_SAMPLE_COLUMNS = SAMPLING_CELL + [
    "prompt_id",
    "domain",
    "n_samples",
    "m",
    "p_first",
    "p_min_position",
    "p_prefix",
    "p_value",
    "alpha",
    "rejected",
    "n_prompts",
    "n_rejected",
    "n_below_alpha",
    "p_known",
    "rejected_known",
    "n_rejected_known",
    "planned_power",
]
ENGINE_TWO_SAMPLE_COLUMNS = [
    "engine",
    "reference",
    "engine_seed",
    "reference_seed",
    "patches",
    "prompt_id",
    "domain",
    "temperature",
    "top_p",
    "top_k",
    "n_samples",
    "m",
    "p_first",
    "p_prefix",
    "p_value",
    "alpha",
    "rejected",
    "n_prompts",
    "n_rejected",
]
SAMPLING_TABLES = {
    "sampling_tv.csv": SAMPLING_TV_COLUMNS + [ERRORS],
    "sampling_two_sample.csv": TWO_SAMPLE_COLUMNS + [ERRORS],
}
SAMPLING_ENGINE_TABLES = {"sampling_engines.csv": ENGINE_TWO_SAMPLE_COLUMNS + [ERRORS]}
SAMPLING_FIGURE = "sampling_tv"
# the machine as an axis (`orthrus compare-envs`, docs/MACHINES.md): each claim's verdict per environment (a
# column per environment, so no fixed columns), each cell's match rate per environment, each one's probe
MACHINE_TABLES = ("verdicts_by_env.csv", "match_by_env.csv", "machine_probes.csv")
MACHINE_FIGURE = "match_by_env"

# ---- figures (results/figures/{name}.{png,pdf}), each drawn from the tables it illustrates
FIGURES = {
    "match_by_domain": "match rate per domain and precision, Wilson CI, one panel per attention",
    "match_vs_ppl": "binned match probability against reference-response PPL, with the fitted logistic model "
    "of ppl_logit.csv (at the mean length and domain mix)",
    "survival": "fraction of trajectories still matching after t tokens",
    "first_divergence_hist": "histogram of first-divergence positions",
    "tpf_by_domain": "tokens per forward per domain (verify-only and all forwards)",
    "margin_at_divergence": "AR top-1/top-2 margin at the first divergence (forensics)",
    "pairwise_match": "heat map of match rates between all decoding results",
    "match_vs_uncertainty": "per-domain match rate against the teacher's near-ties per response",
    "decoders": "how lossless is each decoder: orthrus, assisted, prompt-lookup, engines' files and the controls "
    "per precision, with the oracle's match rate and the batch noise floor",
    "load": "servers under load: match rate against the same server at concurrency 1, and distinct completions "
    "per prompt over the repeats, against concurrency, per server, method and precision",
}
BENCHMARK_FIGURE = "benchmarks"
FIGURE_FORMATS = ("png", "pdf")
