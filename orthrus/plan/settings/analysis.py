"""`analysis`: the study's statistics (the verdicts' rounding bound is orthrus/audit/verdict.py
ROUNDING_ULPS); `benchmarks`: the downstream tasks through lm-evaluation-harness."""

from orthrus.audit.verdict import ROUNDING_ULPS
from orthrus.contracts import ATTENTIONS, PRECISIONS
from orthrus.plan.settings.keys import NAME, PRECISION, array, choices, key, section
from orthrus.world.tiny_tasks import TASKS

TINY_TASKS = sorted(TASKS)  # the tiny world's local lm-eval tasks


ANALYSIS = section(
    "Statistics of the study.",
    {
        "ppl_precision": choices(
            PRECISIONS, "fp32", "Precision of the teacher when scoring reference responses (response-conditional PPL)."
        ),
        "ppl_attention": choices(
            ATTENTIONS,
            "eager",
            ("Attention implementation of the perplexity scorer (the authors scored with flash_attention_2 in bf16)."),
        ),
        "near_tie": key(
            float,
            0.125,
            (
                "Top-1/top-2 logit margin below which a divergence counts as a near-tie, in logits (not a "
                "percent), at most 2: four bf16 units in the last place at logits of magnitude 64 to 128, beyond "
                "any rounding difference; 12.5 would make nearly every step a near-tie."
            ),
            minimum=0,
            maximum=2,
        ),
        "rounding_ulps": section(
            (
                "The largest margin, in units in the last place of the decoding precision at the logits' "
                "magnitude, between the reference's token and a decoder's at a first divergence that the verdict "
                "`rounding` accepts (orthrus/audit/verdict.py), per precision; a larger one, or a token the "
                "decoder's own pass does not rank first, is `structural`. bf16 and fp16 logits are rounded to "
                "their format at the end, so a verify block and single steps part by a few ulps; fp32 logits keep "
                "every rounding of the network's sums, tens of ulps (`python benchmarks/rounding_noise.py` "
                "measures them on the shipped teacher). Two logits that each move by d change "
                "rank only within 2d: each default is twice the largest measured, rounded up to a power of two "
                "(orthrus/audit/verdict.py). tf32 (fp32 with TF32 products) takes fp16's bound, not yet measured "
                "on a GPU."
            ),
            {
                "bf16": key(float, ROUNDING_ULPS["bf16"], minimum=0, maximum=1024),
                "fp16": key(float, ROUNDING_ULPS["fp16"], minimum=0, maximum=1024),
                "fp32": key(float, ROUNDING_ULPS["fp32"], minimum=0, maximum=1024),
                "tf32": key(float, ROUNDING_ULPS["tf32"], minimum=0, maximum=1024),
            },
            default=ROUNDING_ULPS,
        ),
        "equivalence_margin": key(
            float,
            2.0,
            (
                "Margin of the benchmark claim in `claims.csv`, in points of the task's score (a 0-1 score counts"
                " 100 points, chrF is already 0-100): the paired per-document score difference between a run and "
                "its AR reference must be shown inside +-margin by two one-sided tests (TOST) at 5%. With few "
                "documents one changed answer moves a score by more than 2 points, and equivalence is then not "
                "shown."
            ),
            exclusiveMinimum=0,
        ),
        "alpha": key(
            float,
            0.05,
            ("Level of the claims' tests with a p-value (beta1, Welch's test of the perplexities, TOST)."),
            exclusiveMinimum=0,
            exclusiveMaximum=0.5,
        ),
        "power": section(
            (
                "The power planned for the claims tested by an estimate and its standard error "
                "(orthrus/report/claims/power.py; `orthrus power --configfile FILE` prints it before a run): "
                "per claim, a pilot run's effect, its standard error and its n (`orthrus power --pilot "
                "CLAIMS.csv` reads them off a committed run). A claim whose power at its cell's n is below "
                "`target` says `underpowered`, whatever its test gave. No pilot: no plan, every verdict is "
                "the test's."
            ),
            {
                "target": key(
                    float, 0.9, "The power each planned claim needs.", exclusiveMinimum=0.5, exclusiveMaximum=1
                ),
                "pilot": key(
                    dict,
                    {},
                    "claim -> {effect, se, n}: the pilot's estimate, its standard error and its prompts.",
                    propertyNames={"enum": ["ppl-higher-when-diverging", "beta1-negative"]},
                    additionalProperties=section(
                        "One claim's pilot.",
                        {
                            "effect": key(float, description="The pilot's estimate (not 0)."),
                            "se": key(float, description="Its standard error.", exclusiveMinimum=0),
                            "n": key(int, description="The prompts it rested on.", minimum=2),
                        },
                        required=["effect", "se", "n"],
                    ),
                ),
            },
            default={},
        ),
    },
    default={},
)

BENCHMARKS = section(
    "Downstream tasks through lm-evaluation-harness (Table 7).",
    {
        "enabled": key(bool, True, "Run the benchmarks stage."),
        "tasks": array(
            key(str, pattern=NAME),
            [],
            "lm-eval task names (a name, not a path segment: no leading `.` or `-`, no `/`).",
            uniqueItems=True,
        ),
        "tiny_tasks": key(
            (bool, list),
            True,
            ("Generate the tiny world's local tasks (offline default): true for all five, or a list of their names."),
            items=choices(TINY_TASKS),
            minItems=1,
            uniqueItems=True,
        ),
        "n_docs": key(
            (int, dict),
            40,
            (
                "Documents per tiny-world task: one count for every task, or {task: count} naming each task that "
                "runs (a task whose answers rarely change needs fewer documents than one whose rare changes would"
                " otherwise decide its equivalence verdict)."
            ),
            minimum=1,
            propertyNames={"enum": TINY_TASKS},
            additionalProperties=key(int, minimum=1),
        ),
        "limit": key((int, None), None, "lm-eval --limit (null = all documents).", minimum=1),
        "precisions": array(PRECISION, ["bf16", "fp32"], "Precisions to benchmark at.", minItems=1, uniqueItems=True),
        "attention": choices(ATTENTIONS, "eager", "Attention implementation for the benchmarks."),
        "max_gen_toks": key(
            (int, None),
            128,
            "Generation cap per request; null = each task's own generation length (the authors').",
            minimum=1,
        ),
        "chat_template": key(
            bool,
            True,
            (
                "Render prompts through the chat template as the trajectory study does; false = plain prompts "
                "(the authors')."
            ),
        ),
        "ar_baseline": choices(
            ["ours", "hf"],
            "ours",
            (
                "The teacher's AR baseline: our AR loop (decoder ar) or lm-eval's own HF generate (decoder "
                "ar-ref, the authors')."
            ),
        ),
        "allow_code_eval": key(
            bool, False, "Opt in to running model-written code (HumanEval); also needs HF_ALLOW_CODE_EVAL=1."
        ),
        "include_paths": array(
            key(str, minLength=1),
            [],
            (
                "Extra lm-eval task directories (lm-eval's --include_path): a task file there replaces the "
                "built-in task of its name, e.g. lm-eval's own gsm8k over local data files on an offline cluster "
                "(configs/rehearsal.yaml does this with its stand-ins)."
            ),
        ),
    },
    default={},
)
