"""An evaluation prompt set given as a file in the authors' format: `{domain: [prompt, ...]}`.

The follow-up paper's authors publish their evaluation prompts as one JSON object
(`eval/speed_evaluation_dataset.json` in ai-forever/Zarya-Orthrus) and both their trajectory
and their TPF scripts read it as it stands. `prompts.eval_file` (a path, or an http(s)/file URL)
makes that file the evaluation set: its prompts byte for byte, in file order (domains in key
order, prompts in list order), ids `<domain>-<index>` with the 0-based index into the domain's
list. No length filter and no template apply.

Duplicates. The authors' file holds 1,200 prompts of which 1,190 are distinct (gec-en repeats
10). Their trajectory script (`eval/losslessness_evaluation.py`, `process_generations`) keys
every generation by its prompt text, so a repeated prompt is counted once: that is why the
paper reports 1,190 trajectories and gec-en 90. `duplicates: first` reproduces that rule (the
first occurrence is kept, later ones are dropped and counted); `duplicates: error` (the default)
refuses a file with a repeated prompt.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd

from orthrus.data.prompt_set import visible
from orthrus.io import InputError

DUPLICATES = ("error", "first")


class PromptFileError(InputError):
    """A prompt file that cannot be used; the message names the file and the problem (one line:
    `orthrus prompts` prints it without a traceback)."""


# the authors' file is 0.4 MB; a URL that streams more (file:///dev/zero) is not a prompt file
MAX_BYTES = 256 * 2**20


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise _DuplicateKey(k)
        seen[k] = v
    return seen


TIMEOUT = 120.0  # seconds for a whole download (prompts.eval_file_timeout)


def _download(src: str, timeout: float) -> bytes:
    """At most MAX_BYTES + 1 bytes of `src`, within `timeout` seconds in all: urllib's timeout
    bounds each socket operation, so a server trickling bytes is stopped by the deadline."""
    deadline = time.monotonic() + timeout
    chunks, size = [], 0
    with urllib.request.urlopen(src, timeout=timeout) as r:  # noqa: S310 - URL from the config
        while size <= MAX_BYTES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s")
            # read1: what one socket read brings (read() would wait for the whole chunk)
            chunk = getattr(r, "read1", r.read)(min(1 << 20, MAX_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def read_source(src: str, sha256: str | None = None, timeout: float = TIMEOUT) -> bytes:
    """The bytes of a local path or a URL (fetched within `timeout` seconds), checked against
    `sha256` when given."""
    if src.lower().startswith("file:"):
        local = Path(urllib.request.url2pathname(urllib.parse.urlsplit(src).path))
        if local.exists() and not local.is_file():  # file:///dev/zero, a named pipe: never a prompt file
            raise PromptFileError(f"prompt file {src}: not a regular file")
    if "://" in src:
        try:
            data = _download(src, timeout)
        except (OSError, ValueError) as e:  # URLError, HTTPError, a timeout, an unknown scheme
            reason = getattr(e, "reason", None) or e or type(e).__name__
            raise PromptFileError(f"prompt file {src}: cannot fetch it ({reason})") from None
        if len(data) > MAX_BYTES:
            raise PromptFileError(f"prompt file {src}: larger than {MAX_BYTES // 2**20} MiB; not a prompt file")
    else:
        path = Path(src)
        if path.exists() and not path.is_file():  # a named pipe or a device would block or never end
            raise PromptFileError(f"prompt file {src}: not a regular file")
        if path.is_file() and path.stat().st_size > MAX_BYTES:
            raise PromptFileError(f"prompt file {src}: larger than {MAX_BYTES // 2**20} MiB; not a prompt file")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise PromptFileError(f"prompt file {src}: cannot read it ({e.strerror or e})") from e
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256.lower():
        raise PromptFileError(f"prompt file {src}: sha256 {digest} differs from the expected {sha256}")
    return data


def parse_prompt_file(data: bytes, src: str = "<bytes>") -> dict[str, list[str]]:
    """Validated `{domain: [prompt, ...]}` from JSON bytes."""
    try:
        obj = json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PromptFileError(f"prompt file {src}: not UTF-8 JSON ({e})") from e
    except _DuplicateKey as e:  # json keeps the last value silently: a domain's prompts would vanish
        raise PromptFileError(f"prompt file {src}: the key {e.args[0]!r} is given twice") from None
    if not isinstance(obj, dict) or not obj:
        raise PromptFileError(
            f"prompt file {src}: expected a non-empty JSON object {{domain: [prompt, ...]}}, got {type(obj).__name__}"
        )
    for domain, prompts in obj.items():
        if not visible(domain):
            raise PromptFileError(f"prompt file {src}: an empty domain name")
        if not isinstance(prompts, list):
            raise PromptFileError(
                f"prompt file {src}: domain {domain!r} is a {type(prompts).__name__}, not a list of prompts"
            )
        if not prompts:
            raise PromptFileError(f"prompt file {src}: domain {domain!r} has no prompts")
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise PromptFileError(f"prompt file {src}: {domain!r}[{i}] is a {type(p).__name__}, not a string")
            if not visible(p):
                # nothing but whitespace, control or zero-width characters
                raise PromptFileError(f"prompt file {src}: {domain!r}[{i}] is an empty prompt")
    return obj


def prompt_table(domains: dict[str, list[str]], src: str = "<bytes>", duplicates: str = "error"):
    """(DataFrame prompt_id, domain, prompt; dropped-duplicate count per domain)."""
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates must be one of {DUPLICATES}, got {duplicates!r}")
    first: dict[str, str] = {}
    rows, dropped = [], {}
    for domain, prompts in domains.items():
        dropped[domain] = 0
        for i, p in enumerate(prompts):
            pid = f"{domain}-{i}"
            if p in first:
                if duplicates == "error":
                    raise PromptFileError(
                        f"prompt file {src}: {pid} repeats {first[p]} "
                        "(set prompts.eval_duplicates: first to keep the first occurrence)"
                    )
                dropped[domain] += 1
                continue
            first[p] = pid
            rows.append({"prompt_id": pid, "domain": domain, "prompt": p})
    return pd.DataFrame(rows, columns=["prompt_id", "domain", "prompt"]), dropped


def load_eval_file(src: str, sha256: str | None = None, duplicates: str = "error", timeout: float = TIMEOUT):
    """(eval DataFrame, log dict) of the prompt file at `src` (path or URL)."""
    data = read_source(str(src), sha256, timeout)
    df, dropped = prompt_table(parse_prompt_file(data, str(src)), str(src), duplicates)
    log = {
        "eval_file": str(src),
        "sha256": hashlib.sha256(data).hexdigest(),
        "duplicates": duplicates,
        "eval": {d: {"kept": int((df["domain"] == d).sum()), "duplicate": n} for d, n in dropped.items()},
    }
    for d, c in log["eval"].items():
        print(
            f"[prompts] eval file {d}: kept {c['kept']}, dropped {c['duplicate']} duplicates",
            file=sys.stderr,
            flush=True,
        )
    return df, log
