"""Reading a prompt set, the evaluation or distillation prompts every stage shares
(docs/DESIGN.md, "Prompt sets"), and the one rule for a prompt too long for a model.

Every reader goes through `read_prompt_set`: UTF-8, no null or empty value, unique ids; an error
names the file, the row id and the column.

Two kinds of text are refused, naming the prompt id. A value with nothing visible: only
whitespace, control characters (NUL among them) or zero-width and other format characters.
A prompt holding a chat control token (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, any
`<|...|>`): tokenizers parse such a token inside any text, so the prompt would open or close chat
turns of its own (`<|im_end|><|im_start|>assistant ...` writes the assistant's turn); it is not
rendered as plain text.
"""

from __future__ import annotations

import re
import unicodedata

import pandas as pd

from orthrus.contracts import PROMPT_COLUMNS
from orthrus.errors import InputError

# the `<|name|>` family of chat control tokens (ChatML's and Qwen's, Llama 3's, GPT's)
CONTROL_TOKEN = re.compile(r"<\|[^<>|\s]{1,64}\|>")


def visible(text: str) -> bool:
    """Whether `text` has a character other than whitespace, control or format (zero-width) ones."""
    return any(not c.isspace() and not unicodedata.category(c).startswith("C") for c in text)


def control_token(text: str) -> str | None:
    """The first chat control token in `text`, or None."""
    m = CONTROL_TOKEN.search(text)
    return m.group(0) if m else None


def _first(problems: list[str], limit: int = 5) -> str:
    more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


def read_prompt_set(path, columns=PROMPT_COLUMNS) -> pd.DataFrame:
    """The prompt set at `path` (Parquet), checked; raises InputError naming file, row id, column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise InputError(f"{path}: prompt set not found") from None
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: not a readable Parquet prompt set ({e})") from None
    return check_prompt_table(table, path, columns)


def check_prompt_set(df: pd.DataFrame, name, columns=PROMPT_COLUMNS) -> pd.DataFrame:
    """The checks of `read_prompt_set` on a prompt set in memory (before a stage writes it,
    e.g. one taken from `prompts.eval_file`); `name` stands for the file in the messages."""
    import pyarrow as pa

    try:
        # an empty set (e.g. no distillation prompts when the corpus comes ready) has string columns
        schema = pa.schema([(c, pa.string()) for c in df.columns]) if df.empty else None
        table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
    except (pa.ArrowException, TypeError) as e:
        raise InputError(f"{name}: not a table of prompts ({e})") from None
    return check_prompt_table(table, name, columns)


def check_prompt_table(table, path, columns=PROMPT_COLUMNS) -> pd.DataFrame:
    """A pyarrow table as a checked prompt set; raises InputError naming `path`, row id, column."""
    import pyarrow as pa

    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing} (has {table.column_names})")
    problems, bad_rows = [], {}
    for c in columns:
        kind = table.schema.field(c).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            problems.append(f"column {c!r} must hold UTF-8 strings, found {kind}")
            continue
        try:
            table.column(c).validate(full=True)
        except pa.ArrowInvalid:  # find the rows: the bytes are there, they are just not UTF-8
            for i, raw in enumerate(table.column(c).cast(pa.binary()).to_pylist()):
                try:
                    (raw or b"").decode("utf-8")
                except UnicodeDecodeError:
                    bad_rows.setdefault(c, []).append(i)
    if problems:
        raise InputError(f"{path}: {_first(problems)}")
    # rows are named by their prompt_id where it is a readable string, else by their index
    raw_ids = table.column("prompt_id").cast(pa.binary()).to_pylist()
    ids = [
        f"row {i}" if not v or i in bad_rows.get("prompt_id", ()) else f"prompt_id {v.decode()!r}"
        for i, v in enumerate(raw_ids)
    ]
    problems = [f"{ids[i]}: column {c!r} is not valid UTF-8" for c, rows in bad_rows.items() for i in rows]
    if problems:
        raise InputError(f"{path}: {_first(problems)}")
    df = table.select(list(columns)).to_pandas()
    for c in columns:
        for i in df.index[df[c].isna()]:
            problems.append(f"{ids[i]}: column {c!r} is null")
        # astype(bool): an empty column maps to an empty str series, which `~` and `&` would treat as strings
        for i in df.index[df[c].notna() & ~df[c].fillna("").map(visible).astype(bool)]:
            problems.append(
                f"{ids[i]}: column {c!r} is empty (nothing but whitespace, control or zero-width characters)"
            )
    if "prompt" in df.columns:
        for i, token in df["prompt"].fillna("").map(control_token).dropna().items():
            problems.append(
                f"{ids[i]}: column 'prompt' holds the chat control token {token!r}, which would "
                "become a real control token (a chat turn of the prompt's own); remove it"
            )
    dup = df["prompt_id"][df["prompt_id"].duplicated() & df["prompt_id"].notna()].unique().tolist()
    problems += [f"prompt_id {d!r}: column 'prompt_id' is not unique" for d in dup]
    if problems:
        raise InputError(f"{path}: {_first(problems)}")
    return df


def first_per_domain(prompts: pd.DataFrame, n: int | None) -> pd.DataFrame:
    """The first `n` prompts of each domain, in the set's order (None: all): a cell decoded on
    fewer prompts than the study's (decode.grids' `prompts_per_domain`, the frontier)."""
    return prompts if n is None else prompts.groupby("domain", sort=False).head(n)


def length_error(n_prompt: int, max_new_tokens: int, limit: int) -> str | None:
    """The one rule for over-length prompts (see the module doc): None when the prompt fits."""
    if n_prompt + max_new_tokens <= limit:
        return None
    return (
        f"PromptTooLong: prompt ({n_prompt} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
        f"{limit} positions"
    )
