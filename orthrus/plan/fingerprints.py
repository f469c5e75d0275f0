"""Content fingerprints of inputs the workflow cannot see change: model directories, an eval file,
a local dataset (orthrus/plan/study.py's params)."""

from __future__ import annotations

import glob
import hashlib
import json
import os


# Content fingerprints as params: Snakemake reruns a job whose params changed, and evaluates them
# again once the jobs before it have run. A directory output's timestamp is its own
# `.snakemake_timestamp`, so new weights inside results/teacher would otherwise go unseen, as
# would a changed eval file or local dataset (no Snakemake inputs).
def file_fingerprint(path) -> str:
    """A file's SHA-256 from the sidecar its writer stored (`FILE.sha256`, orthrus/models/checkpoint.py)
    while that still describes it, else its size and modification time: cheap for every DAG build
    (weights and datasets can be gigabytes), and new whenever the file is written again."""
    st = os.stat(path)
    try:
        with open(f"{path}.sha256", encoding="utf-8") as f:
            meta = json.load(f)
        if (meta["size"], meta["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
            return meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return f"{st.st_size}:{st.st_mtime_ns}"


def fingerprint(files, root="") -> str:
    """One digest of `files` (names relative to `root`) and their fingerprints; '' for none."""
    if not files:
        return ""
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f"{os.path.relpath(f, root) if root else f}\0{file_fingerprint(f)}\n".encode())
    return h.hexdigest()


def weights_fingerprint(*paths) -> str:
    """The config and weight files of each local model directory in `paths` (a hub id has none:
    `revisions` pins it); '' before the directory exists."""
    parts = []
    for path in paths:
        d = os.path.expanduser(path)
        files = (
            [
                os.path.join(d, f)
                for f in sorted(os.listdir(d))
                if f == "config.json" or f.endswith((".safetensors", ".bin"))
            ]
            if os.path.isdir(d)
            else []
        )
        parts.append(fingerprint(files, d))
    return ",".join(parts)


def model_files(path) -> list[str]:
    """The config and weight files of a local model directory given in the config (none for a
    hub id): they are inputs, so that new weights at the same path rerun what depends on them.
    Snakemake reads braces even in what an input function returns as wildcards, with no escape,
    so a path with braces gives no inputs: its weights_fingerprint param (taken from the path, not
    as a wildcard pattern) still reruns what depends on it. Glob characters are escaped."""
    path = os.path.expanduser(path)
    if not os.path.isdir(path) or "{" in path or "}" in path:
        return []
    d = glob.escape(path)
    return sorted(glob.glob(os.path.join(d, "*.json")) + glob.glob(os.path.join(d, "*.safetensors")))
