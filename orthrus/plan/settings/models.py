"""`models`, `revisions`, `external_models`: the Orthrus variants to train (each the settings of
`orthrus train`, whose defaults are orthrus/distill/settings.py DEFAULTS), the hub revisions, the
released checkpoints studied beside them."""

from orthrus.distill.settings import ATTENTIONS as TRAIN_ATTENTIONS
from orthrus.distill.settings import DEFAULTS as TRAIN
from orthrus.distill.settings import MAX_LR, OBJECTIVES, SCHEDULES, SEED_MAX
from orthrus.plan.settings.keys import NAMES, array, choices, key, section, with_defaults

MODELS = key(
    dict,
    {},
    (
        "Orthrus variants to train: {name: settings of `orthrus train`}; a setting left out takes its "
        "default from orthrus/distill/settings.py DEFAULTS (shown here). Names are unique across the "
        "teacher, the variants and external_models."
    ),
    propertyNames=NAMES,
    additionalProperties=section(
        None,
        with_defaults(
            TRAIN,
            {
                "description": key(str, description="Free text, copied to the training summary."),
                "objective": choices(
                    OBJECTIVES,
                    description=(
                        "ce: cross-entropy on the teacher's tokens; kl: forward KL to the frozen AR view; mix: both."
                    ),
                ),
                "kl_weight": key(
                    float, description="mix only: loss = (1 - kl_weight) * ce + kl_weight * kl.", minimum=0, maximum=1
                ),
                "offset_weights": array(
                    key(float, minimum=0),
                    nullable=True,
                    description=(
                        "Loss weight per block slot, K-1 or K values, not all 0 (null = 1 for slots 0..K-2, 0 for the "
                        "last)."
                    ),
                    minItems=1,
                ),
                "block_size": key(
                    int,
                    description=(
                        "Block size K (one anchor plus K-1 proposals), below max_len (a sequence holds a prompt token and"
                        " a whole block)."
                    ),
                    minimum=2,
                ),
                "blocks_per_seq": key(int, description="Anchors per sequence, drawn inside the response.", minimum=1),
                "min_loss_tokens": key(
                    int, description="A block needs at least this many weighted targets (the authors: 4).", minimum=1
                ),
                "mask_token_id": key(
                    (int, None),
                    description=(
                        "null: a dedicated new token named `mask_token`; or an existing token id, inside the teacher's "
                        "vocabulary (checked before any job where the vocabulary is known: a tiny, shipped or local "
                        "teacher)."
                    ),
                    minimum=0,
                ),
                "mask_token": key(
                    str, description="Name of that new mask token (the authors: <|orthrus_mask|>).", minLength=1
                ),
                "lr": key(
                    float,
                    description=(
                        "Peak learning rate, at most 1 (AdamW moves every weight by about lr per step: above 1 each step "
                        "overwrites the weights)."
                    ),
                    exclusiveMinimum=0,
                    maximum=MAX_LR,
                ),
                "schedule": choices(
                    SCHEDULES,
                    description="After warm-up: cosine decay to lr * min_lr_ratio, or constant (the authors).",
                ),
                "min_lr_ratio": key(
                    float, description="Cosine decay from lr to lr * min_lr_ratio.", minimum=0, maximum=1
                ),
                "warmup_steps": key(
                    int,
                    description=(
                        "Linear warm-up steps, fewer than the run's optimizer steps (else the rate never leaves warm-up):"
                        " below max_steps when it is set; else below epochs x (distillation prompts // global batch), "
                        "checked before any job where the prompt count is known, and by `orthrus train` on the corpus it "
                        "reads."
                    ),
                    minimum=0,
                ),
                "weight_decay": key(float, description="AdamW weight decay (matrices only).", minimum=0),
                "betas": array(
                    key(float, minimum=0, exclusiveMaximum=1), description="AdamW betas.", minItems=2, maxItems=2
                ),
                "grad_clip": key((float, None), description="Gradient norm clip (0 or null = off).", minimum=0),
                "grad_accum": key(int, description="Micro-batches per optimizer step.", minimum=1),
                "batch_size": key(int, description="Sequences per micro-batch per process.", minimum=1),
                "max_len": key(
                    int, description="Prompt + response tokens; longer sequences are truncated (counted).", minimum=2
                ),
                "epochs": key(int, description="Passes over the corpus (unless max_steps is set).", minimum=1),
                "max_steps": key(
                    (int, None), description="If set, overrides epochs (cycling through the data as needed).", minimum=1
                ),
                "seed": key(
                    int,
                    description=(
                        "Seed of the initialisation order, batches and anchors; the rule adds the global seed (the sum at"
                        " most 2^64 - 1, torch's range)."
                    ),
                    minimum=0,
                    maximum=SEED_MAX,
                ),
                "length_bucket_pool": key(
                    int, description="Sort pools of this many global batches by length before cutting.", minimum=0
                ),
                "bf16": key(bool, description="bf16 autocast on CUDA (CPU always trains in fp32)."),
                "attention": choices(
                    TRAIN_ATTENTIONS, description="Attention kernel for training (the saved model loads with eager)."
                ),
                "log_every": key(int, description="Log a training row every N steps.", minimum=0),
                "save_every": key(int, description="Checkpoint every N optimizer steps (0 = never).", minimum=0),
                "keep_checkpoint": key(bool, description="Keep the checkpoint directory after a successful run."),
                "eval_every": key(
                    int, description="Held-out tokens per forward every N steps (0 = only at the end).", minimum=0
                ),
                "eval_per_domain": key(
                    int, description="Prompts per domain for the held-out TPF (0 = no eval).", minimum=0
                ),
                "eval_max_new_tokens": key(int, description="Tokens per held-out TPF prompt.", minimum=0),
            },
        ),
        nullable=True,
        fill_defaults=False,
    ),
)

REVISIONS = key(
    dict,
    {},
    (
        "{hub id: commit, tag or branch}: pins each hub model (teacher.path, teacher.draft.path, "
        "external_models) and the hub corpus (corpus.dataset) to a revision wherever it is loaded (the "
        "rules pass `ID@REV`); every decoding row records the commit it read (env `model_commit`). A key "
        "that is not a hub id this config loads is an error."
    ),
    propertyNames={"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*(?![\\s\\S])"},
    additionalProperties=key(str, pattern="^[A-Za-z0-9][A-Za-z0-9_./-]*(?![\\s\\S])"),
)

EXTERNAL_MODELS = key(
    dict,
    {},
    (
        "Orthrus checkpoints in the released format to study beside the trained ones: {name: hub id or "
        "directory}. A local directory must exist when the workflow is parsed."
    ),
    propertyNames=NAMES,
    additionalProperties=key(str, minLength=1),
)
