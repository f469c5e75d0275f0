#!/usr/bin/env bash
# A wheelhouse for an offline GPU node (issue 52): every wheel the study needs on the node's Python,
# except what the node already has, to carry over and install there with envs/install-offline.sh.
#     bash envs/wheelhouse.sh OUT_DIR [--python 3.12] [--platform manylinux_2_28_x86_64]
#                                     [--exclude torch,nvidia-*,triton,numpy,scipy,pyarrow,matplotlib]
#                                     [--node envs/gpu-node-packages.txt|none] [--extras real] [--max-mb 60]
# Run it where the package registry is reachable; PYTHON (default python3, >= 3.10 with pip) resolves,
# downloads and builds. Why: a cluster's GPU nodes have no network but their own Python and their own
# torch (e.g. CPython 3.12, torch 2.11+cu130), numpy, scipy, ...; a second torch beside the node's would
# be gigabytes and would not match its CUDA, so the wheelhouse leaves these to the node.
#   --python, --platform  the node's CPython X.Y and newest manylinux_2_N tag: uv resolves for them,
#                markers included, and pip downloads their wheels
#   --exclude    fnmatch patterns of what the node has (a leading + adds to the default); what only
#                they need is left out with them (torch's nvidia-* wheels, triton, sympy, ...)
#   --node       a file naming the node's packages (`python3 -m pip list --format=freeze` there), added
#                to --exclude except what the study always carries (transformers, tokenizers,
#                safetensors, huggingface-hub, accelerate, at constraints.txt's versions); default
#                envs/gpu-node-packages.txt (this workplace's H200 image); `none` for no list
#   --extras     the project's extras to carry (default real: gguf; slurm for the SLURM plugin)
#   --max-mb     the limit on the project's git-tracked files plus the wheelhouse (default 60: what a
#                lent GPU machine receives is 64 MiB at most); the script fails naming the size over it
# OUT_DIR gets the wheels, requirements.txt and MANIFEST.txt (each wheel, the target, and what the
# wheels ask of the node, which install-offline.sh checks there). Snakemake's pulp loses its bundled cbc
# binaries (35 MB; snakemake schedules without them). The logic is envs/wheelhouse.py's.
set -euo pipefail
python="${PYTHON:-python3}"
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;; esac
command -v "$python" > /dev/null || { echo "wheelhouse.sh: no Python '$python' (set PYTHON)" >&2; exit 2; }
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "wheelhouse.sh: $python is older than 3.10" >&2; exit 2; }
exec "$python" "$(dirname "$0")/wheelhouse.py" "$@"
