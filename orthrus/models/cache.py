"""The KV cache's keyword in transformers' forward, which the supported releases spell
differently: `past_key_values` through 5.23, `cache` from 5.24 on, where the old spelling still
works but warns (FutureWarning: removed in 5.40). One place knows, so that every forward this
package calls runs warning-free on the pinned release and on the newest."""

from __future__ import annotations

import functools
import inspect

NEW, OLD = "cache", "past_key_values"


@functools.cache
def _keyword(cls) -> str:
    # transformers' deprecation decorator keeps the signature (functools.wraps), so it names the new
    # parameter exactly where the release has it
    return NEW if NEW in inspect.signature(cls.forward).parameters else OLD


def cache_kwarg(model, cache) -> dict:
    """`{keyword: cache}` for `model(...)`: the keyword its class's forward takes."""
    return {_keyword(type(model)): cache}
