"""`tpf`, `frontier`, `sampling`: the runs beside the trajectory study; the frontier's defaults are
orthrus/decode/frontier.py DEFAULTS and BASE."""

from orthrus.contracts import ATTENTIONS, PRECISIONS
from orthrus.decode.frontier import BASE
from orthrus.decode.frontier import DEFAULTS as FRONTIER
from orthrus.engines.runner import ENGINE_CHOICES, STAND_IN_DECODERS
from orthrus.options import EOS_POLICIES, LAST_BLOCKS, PREFILL_LOGITS
from orthrus.plan.settings.keys import (
    ATTENTION,
    MESSAGE,
    NAMES,
    PRECISION,
    VLLM_PATCH_LIST,
    array,
    choices,
    key,
    section,
)
from orthrus.plan.settings.serving import openai_keys

TPF = section(
    (
        "A separate tokens-per-forward run for Table 2 at its own settings (the authors': 256 new tokens,"
        " a user-only message, bf16); `tpf_by_domain.csv` reports it beside the study's rows. The "
        "decoding options not set here come from `decode`."
    ),
    {
        "enabled": key(bool, False, "Run it (for every Orthrus model)."),
        "max_new_tokens": key(int, 256, "Tokens per prompt.", minimum=1, maximum=32768),
        "message": key(str, "none", "Message format (see decode.message).", pattern=MESSAGE),
        "precisions": array(PRECISION, ["bf16"], "Precisions of the run.", minItems=1, uniqueItems=True),
        "attentions": array(
            ATTENTION,
            ["eager"],
            "Attention implementations of the run (the authors' speed script used flash_attention_2).",
            minItems=1,
            uniqueItems=True,
        ),
        "eos": choices(EOS_POLICIES, description="As decode.eos (default there)."),
        "last_block": choices(LAST_BLOCKS, description="As decode.last_block."),
        "prefill_logits": choices(PREFILL_LOGITS, description="As decode.prefill_logits."),
        "deterministic": key(bool, description="As decode.deterministic."),
    },
    default={},
)

FRONTIER = section(
    (
        "The price of exactness (`orthrus frontier`, results/tables/exactness_cost.csv and its figure): "
        "one Orthrus model's loop on a few prompts per domain in every setting that could restore the AR "
        "trajectory (each precision and attention kernel, and the base cell with the guarded verify at "
        "each TAU), each compared with the model's own AR view in the same cell and timed side by side in"
        " one job. The other decoding options come from `decode`."
    ),
    {
        "enabled": key(bool, True, "Run it (needs an Orthrus model)."),
        "model": key(
            (str, None),
            None,
            ("The Orthrus model it measures (a key of models or external_models); null is the first trained one."),
        ),
        "prompts_per_domain": key(
            int,
            FRONTIER["prompts_per_domain"],
            ("Prompts per domain (the first of each domain in the evaluation set), the same in every setting."),
            minimum=1,
            maximum=1000,
        ),
        "precisions": array(
            PRECISION,
            FRONTIER["precisions"],
            "Precisions measured (each with every attention kernel).",
            minItems=1,
            uniqueItems=True,
        ),
        "attentions": array(
            ATTENTION, FRONTIER["attentions"], "Attention kernels measured.", minItems=1, uniqueItems=True
        ),
        "guards": array(
            key(float, exclusiveMinimum=0, maximum=1000),
            FRONTIER["guards"],
            "TAU values of the guarded verify (decode.verify_guard) measured on the base cell.",
            uniqueItems=True,
        ),
        "base": section(
            ("The cell the guards run on and the times are relative to (the one where bf16 diverges on CPU)."),
            {
                "precision": choices(PRECISIONS, BASE["precision"], "Its precision."),
                "attention": choices(ATTENTIONS, BASE["attention"], "Its attention kernel."),
            },
            default={},
        ),
    },
    default={},
)

SAMPLING = section(
    (
        "Lossless in distribution (`orthrus sampling`, docs/SAMPLING.md; results/tables/sampling_tv.csv, "
        "sampling_two_sample.csv and the sampling_tv figure): one Orthrus model's sampled loop. Numerics,"
        " analytic: along reference trajectories sampled from its AR view, the total variation between "
        "each speculative row's exact output distribution and single-step sampling, per precision and "
        "kernel, temperature and top-p. Bugs, empirical: a two-sample test of N sampled m-token prefixes "
        "against plain AR sampling, beside a planted biased sampler (`orthrus-lossy` sampled: q at "
        "temperature 1 in the acceptance ratio). The other decoding options come from `decode`."
    ),
    {
        "enabled": key(bool, False, "Run it (needs an Orthrus model)."),
        "model": key(
            (str, None),
            None,
            ("The Orthrus model it measures (a key of models or external_models); null is the first one."),
        ),
        "seed": key(
            int,
            0,
            ("Seed of the reference trajectories and of the samples (each prompt and arm its own stream)."),
            minimum=0,
        ),
        "temperatures": array(
            key(float, exclusiveMinimum=0, maximum=100),
            [0.7, 1.0],
            "Temperatures of the analytic TV.",
            minItems=1,
            uniqueItems=True,
        ),
        "top_p": array(
            key((float, None), exclusiveMinimum=0, maximum=1),
            [None, 0.9],
            "Top-p settings of the analytic TV (null is none), each at every temperature.",
            minItems=1,
            uniqueItems=True,
        ),
        "precisions": array(
            PRECISION,
            None,
            "Precisions of the analytic TV; null is decode.precisions.",
            nullable=True,
            uniqueItems=True,
        ),
        "attentions": array(
            ATTENTION,
            None,
            "Attention kernels of the analytic TV; null is decode.attentions.",
            nullable=True,
            uniqueItems=True,
        ),
        "prompts_per_domain": key(
            int,
            1,
            (
                "Prompts per domain of the analytic TV (the first of each domain), one reference trajectory each "
                "per setting."
            ),
            minimum=1,
            maximum=1000,
        ),
        "max_new_tokens": key(
            int,
            128,
            (
                "Length of each reference trajectory; the tables' bound_at_length scales the mean TV to "
                "decode.max_new_tokens."
            ),
            minimum=2,
            maximum=100000,
        ),
        "two_sample": section(
            "The empirical two-sample test, in one precision and the first attention kernel.",
            {
                "enabled": key(bool, True, "Run it."),
                "precision": choices(PRECISIONS, "fp32", "Its precision."),
                "temperature": key(
                    float,
                    0.5,
                    "Its temperature (not 1, where the planted bug is none).",
                    exclusiveMinimum=0,
                    maximum=100,
                ),
                "top_p": key((float, None), None, "Its top-p (null is none).", exclusiveMinimum=0, maximum=1),
                "top_k": key((int, None), None, "Its top-k (null is none).", minimum=1),
                "n_samples": key(
                    int,
                    300,
                    "Samples per arm and prompt; the least, where n_samples_max lets the plan raise it.",
                    minimum=10,
                    maximum=1000000,
                ),
                "n_samples_max": key(
                    (int, None),
                    None,
                    (
                        "The most samples per arm and prompt the plan may take (null: n_samples, fixed). Each "
                        "prompt's N is the one at which the known-probability test rejects the planted control "
                        "with probability `power` at Holm's strictest level, from the planted loop's exact "
                        "distributions (orthrus/audit/known_p.py); where this cap binds, the prompt's planned "
                        "power is short and the planted claim says so."
                    ),
                    minimum=10,
                    maximum=1000000,
                ),
                "power": key(
                    float,
                    0.95,
                    "Probability of rejecting the planted control on each prompt that N is planned for.",
                    exclusiveMinimum=0.5,
                    exclusiveMaximum=1,
                ),
                "plan_trajectories": key(
                    int,
                    8,
                    "Reference trajectories the planted control's shift is averaged over, per prompt.",
                    minimum=1,
                    maximum=1000,
                ),
                "m": key(int, 6, "Tokens per sample (the prefix tested).", minimum=2, maximum=1000),
                "prompts_per_domain": key(int, 1, "Prompts per domain.", minimum=1, maximum=1000),
                "domains": array(
                    key(str), None, "The domains tested (null is every domain).", nullable=True, uniqueItems=True
                ),
                "alpha": key(
                    float,
                    0.05,
                    "Family-wise level of Holm's correction over each arm's prompts.",
                    exclusiveMinimum=0,
                    exclusiveMaximum=0.5,
                ),
            },
            default={},
        ),
        "engines": key(
            dict,
            {},
            (
                "Engines' sampled files, tested like the in-process loop (`orthrus engine-samples`, docs/SAMPLING.md; "
                "results/tables/sampling_engines.csv): {name: {path, reference, stand_in, seed}}. Export the "
                "two-sample test's prompts sampled (`snakemake results/export/sampled.jsonl`), sample them with the"
                " engine plain and speculative (docs/SAMPLING.md), name both files here, the speculative one with "
                "`reference` the plain one: each such pair gets the two-sample test per prompt at "
                "sampling.two_sample's settings, with Holm's correction over its prompts. Runs whether or not "
                "`enabled` is (that is the in-process audit)."
            ),
            propertyNames=NAMES,
            additionalProperties=section(
                None,
                {
                    "path": key(
                        str,
                        description=(
                            'The sampled file (JSON Lines, one record per prompt: docs/DESIGN.md, "Sampled engine '
                            'file"); it must exist when the study runs, unless stand_in or engine writes it.'
                        ),
                        minLength=1,
                    ),
                    "reference": key(
                        str,
                        description=(
                            "Another entry of sampling.engines, the same engine's plain sampling, that this entry's "
                            "samples are tested against; an entry without one is only a reference."
                        ),
                    ),
                    "stand_in": choices(
                        list(STAND_IN_DECODERS),
                        description=(
                            "The workflow writes `path` itself with the transformers stand-in engine (`orthrus "
                            "engine-run --engine transformers` on the sampled export): transformers' generate on the "
                            "teacher sampling plain (`ar-ref`) or with prompt lookup (`prompt-lookup`), in two_sample's "
                            "precision and the first of decode.attentions."
                        ),
                    ),
                    "engine": choices(
                        list(ENGINE_CHOICES),
                        description=(
                            "The workflow writes `path` itself with this engine (the project's vLLM recipe in "
                            "engines.vllm_python, or llama.cpp's server, engines.llamacpp_server; one job per engine) "
                            "sampling the sampled export in two_sample's precision."
                        ),
                    ),
                    "gguf": key(
                        str,
                        description="llamacpp: the model file, as decode.engines' `gguf` (left out, two_sample's precision's type).",
                        minLength=1,
                    ),
                    "draft": key(
                        str,
                        description="draft_model: as decode.engines' `draft` (llamacpp: a GGUF type or file, or self).",
                        minLength=1,
                    ),
                    "speculative": choices(
                        ["none", "ngram", "draft_model"],
                        "none",
                        "With engine: plain sampling, or speculative as in decode.engines (draft_model: teacher.draft).",
                    ),
                    "k": key(
                        int,
                        description="With engine: draft tokens proposed per step (left out, 4).",
                        minimum=1,
                        maximum=64,
                    ),
                    "patches": VLLM_PATCH_LIST,
                    **openai_keys(sampled=True),
                    "seed": key(
                        int,
                        description=(
                            "With stand_in or engine: the first prompt's seed (each next prompt + 1); left out, the "
                            "entry's rank x 1000 + sampling.seed, so no two entries the workflow samples share one."
                        ),
                        minimum=0,
                    ),
                },
                required=["path"],
            ),
        ),
    },
    default={},
)
