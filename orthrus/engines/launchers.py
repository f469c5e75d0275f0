"""The engine rows whose OpenAI-compatible server an `openai` entry's `launch: NAME` may start.

Their own module, below the registry (orthrus/engines/runner.py, which takes these rows into ENGINES)
and below the OpenAI engine that asks them: the rows are built once, and no engine module imports the
registry back.
"""

from __future__ import annotations

from orthrus.engines.engine import Engine
from orthrus.engines.llamacpp_engine import LlamaCpp
from orthrus.engines.vllm_engine import VLLM

SERVER_ROWS: tuple[Engine, ...] = (VLLM(), LlamaCpp())
LAUNCHERS: dict[str, Engine] = {e.name: e for e in SERVER_ROWS if e.openai_server is not None}
