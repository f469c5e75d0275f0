"""Orthrus dual-view speculative decoding, and the study of how exact it is."""
from .decoding import GenerateOutput, generate
from .modeling import OrthrusForCausalLM
from .precision import configure, numerical_env

__all__ = ["OrthrusForCausalLM", "GenerateOutput", "generate", "configure", "numerical_env"]
__version__ = "0.1.0"
