"""`prompts` and `corpus`: the evaluation and distillation prompt sets and the training corpus;
`DATASET`, a dataset spec of orthrus/data/prompts.py (the schema's `$defs.dataset`)."""

from orthrus.contracts import PRECISIONS
from orthrus.plan.settings.keys import MESSAGE, NAMES, array, choices, key, ref, section
from orthrus.world.domains import DOMAINS

PROMPTS = section(
    "Evaluation and distillation prompt sets.",
    {
        "source": choices(
            ["tiny", "hf"],
            "tiny",
            "`tiny`: sampled from the tiny world; `hf`: the study's public datasets via `datasets`.",
        ),
        "eval_per_domain": key(
            (int, None),
            20,
            "Evaluation prompts per domain (hf with null = each dataset's own count).",
            minimum=1,
            maximum=100000,
        ),
        "distill_n": key(
            int,
            1000,
            "Number of distillation prompts (disjoint from the evaluation prompts).",
            minimum=1,
            maximum=10000000,
        ),
        "min_chars": key(int, 1, "Prompts shorter than this are dropped and counted.", minimum=0),
        "max_chars": key(int, 1000, "Prompts longer than this are dropped and counted.", minimum=1),
        "domains": array(
            choices(DOMAINS),
            None,
            "tiny only: subset of the world's domains (null = all twelve).",
            nullable=True,
            minItems=1,
            uniqueItems=True,
        ),
        "eval": key(
            dict,
            description="hf only: {domain: dataset spec} (see orthrus/data/prompts.py).",
            propertyNames=NAMES,
            additionalProperties=ref("dataset"),
        ),
        "distill": array(
            ref("dataset"),
            description="hf only: list of dataset specs for distillation prompts, each with its `domain` label.",
        ),
        "eval_file": key(
            (str, None),
            description=(
                "The evaluation set as a file in the authors' format `{domain: [prompt, ...]}` (path, or "
                "http(s)/file URL): its prompts as they stand, in order, ids `<domain>-<index>`, no filter; "
                "replaces the source's evaluation set (orthrus/data/prompt_file.py)."
            ),
            minLength=1,
        ),
        "eval_file_sha256": key(
            (str, None),
            description="Expected sha256 of `eval_file` (checked after reading or downloading it).",
            pattern="^[0-9a-f]{64}$",
        ),
        "eval_file_timeout": key(
            float,
            description=(
                "Seconds a URL `eval_file` may take to download, connecting and reading (code default 120): a "
                "server that accepts and never answers, or trickles, fails naming the URL."
            ),
            exclusiveMinimum=0,
            maximum=3600,
        ),
        "eval_file_split": key(
            (int, None),
            None,
            (
                "Split `eval_file` into both prompt sets: its first N prompts of each domain evaluate, the rest "
                "(deduplicated against them) are the distillation prompts, taken a domain at a time in turn up "
                "to `distill_n` (a real-model study on the authors' prompts alone); null: the whole file evaluates."
            ),
            minimum=1,
        ),
        "eval_duplicates": choices(
            ["error", "first"],
            description=(
                "A prompt repeated in `eval_file`: `error` (the default) refuses the file; `first` keeps the "
                "first occurrence, as the authors' trajectory script effectively did (1,200 prompts, 1,190 "
                "distinct)."
            ),
        ),
    },
    required=["source"],
)

CORPUS = section(
    (
        "The training corpus: the teacher's greedy answers to the distillation prompts (source generate),"
        " or a ready prompt-response dataset (source hf)."
    ),
    {
        "shards": key(
            int,
            2,
            (
                "Number of corpus jobs (scatter), at most the number of distillation prompts (more would leave "
                "shards empty); override with --set-scatter corpus=N (1 to 4096, checked like this key)."
            ),
            minimum=1,
            maximum=4096,
        ),
        "batch_size": key(int, 16, "Batched generation with left padding (recorded in the corpus).", minimum=1),
        "max_new_tokens": key(int, 128, "Response length cap.", minimum=1, maximum=32768),
        "precision": choices(PRECISIONS, "fp32", "Teacher precision for the corpus."),
        "source": choices(
            ["generate", "hf"],
            "generate",
            (
                "`generate`: the teacher answers the distillation prompts; `hf`: a ready prompt-response dataset "
                "(`dataset`, fields prompt and response, as the authors' ZaryaOrthrusDataset), sharded the same "
                "way, no generation (orthrus/data/hf_corpus.py)."
            ),
        ),
        "dataset": key(
            (str, None),
            None,
            ("source hf: hub id (e.g. ai-forever/ZaryaOrthrusDataset-1.7B), local directory or builder name (json)."),
            minLength=1,
        ),
        "split": key(str, "train", "source hf: the split to read.", minLength=1),
        "data_files": array(
            key(str, minLength=1, maxLength=4096),
            None,
            "source hf: data files of `dataset` (e.g. with dataset: json); at most 10,000 paths.",
            nullable=True,
            maxItems=10000,
        ),
        "expected_rows": key(
            (int, None),
            None,
            (
                "source hf: the split's record count, checked by every corpus job when it reads the split (a "
                "different revision, or a dataset whose sharded copies were read beside its full file, fails "
                "naming the dataset and both counts)."
            ),
            minimum=1,
        ),
        "message": key(
            str,
            "empty",
            (
                "Message format of the training sequences' prompts: `empty` (empty system message, then the user "
                "turn), `none` (user turn only, the authors' training data) or `system:<text>`."
            ),
            pattern=MESSAGE,
        ),
    },
    required=["shards", "max_new_tokens"],
)

DATASET = section(
    "A dataset spec of orthrus/data/prompts.py.",
    {
        "path": key(str, description="Hub id or a `datasets` builder (json, parquet, ...).", minLength=1),
        "name": key((str, None), description="Dataset configuration name."),
        "data_files": key(
            (str, list, dict, None),
            description=(
                "Local files for a builder (a path, a list of paths, or {split: paths}; at most 10,000 paths)."
            ),
            maxLength=4096,
            maxItems=10000,
            maxProperties=64,
        ),
        "revision": key((str, None), description="Hub revision."),
        "split": key(str, description="Split (default train)."),
        "column": key(str, description="The text column (default text)."),
        "template": key(str, description="A str.format over the row's columns, instead of column."),
        "n": key(int, description="Prompts to take.", minimum=1),
        "min_chars": key(int, description="Overrides prompts.min_chars.", minimum=0),
        "max_chars": key(int, description="Overrides prompts.max_chars.", minimum=1),
        "shuffle": key(bool, description="Take rows in a seeded random order (default true)."),
        "domain": key(str, description="distill only: the domain label (default: path)."),
    },
    required=["path"],
)
