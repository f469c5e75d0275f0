"""Orthrus dual-view speculative decoding, and the study of how exact it is.

The public names are imported lazily, so that light stages (tables, figures, gathers) start
without loading torch and transformers.
"""

import importlib

__version__ = "0.1.0"
_EXPORTS = {
    "OrthrusForCausalLM": "orthrus.models.modeling",
    "GenerateOutput": "orthrus.decode.loop",
    "generate": "orthrus.decode.loop",
    "DecodeOptions": "orthrus.options",
    "configure": "orthrus.models.precision",
    "numerical_env": "orthrus.models.precision",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'orthrus' has no attribute {name!r}")
