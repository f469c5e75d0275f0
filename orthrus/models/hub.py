"""Hub ids: is a string one, and its pinned revision. Pure Python, so that the model code and
the loaders import it without importing each other."""

from __future__ import annotations

import os
import re
from pathlib import Path

# `owner/name` on the Hugging Face hub
HUB_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def is_hub_id(value) -> bool:
    """`owner/name`, and not a local path: no existing directory `owner/`, no leading `.`, `/` or `~`."""
    value = str(value)
    return bool(HUB_ID.match(value)) and not Path(os.path.expanduser(value.split("/")[0])).is_dir()


def split_revision(value) -> tuple[str, str | None]:
    """`owner/name@REV` -> (`owner/name`, REV): a hub id pinned to a commit, tag or branch, as the
    workflow writes it from the config's `revisions` (anything else: (value, None))."""
    value = str(value)
    head, sep, rev = value.rpartition("@")
    if sep and rev and is_hub_id(head):
        return head, rev
    return value, None


def snapshot_commit(path) -> str | None:
    """The commit of a hub snapshot directory (`.../snapshots/<commit>`), None for a local model."""
    p = Path(path)
    return p.name if p.parent.name == "snapshots" else None
