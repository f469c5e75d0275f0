#!/usr/bin/env bash
# The GPU check in one command, for an offline GPU node (docs/GPU.md):
#   bash benchmarks/gpu_check.sh [--wheelhouse DIR] [--out DIR] [--work DIR] [--cores N]
#                                [--world-seconds S] [--rehearsal-seconds S] [--rehearsal run|dry|skip]
# 1. with --wheelhouse (built by envs/wheelhouse.sh on a machine that reaches the registry), installs the
#    project's dependencies from it with `pip install --no-index`, leaving the node's torch alone
#    (envs/install-offline.sh);
# 2. runs the GPU-shaped world (configs/gpu.yaml) and the paper rehearsal on CUDA (benchmarks/gpu_rehearsal.sh),
#    each under its own time limit (defaults 330 s and 210 s: 9 minutes in all, inside a 10-minute
#    call; the paper rehearsal took 311 s on an H200 with 8 cores);
# 3. writes the record to --out (default docs/gpu): environment.json (GPU, driver, CUDA, torch, TF32,
#    cuBLAS and SDPA settings), the world's claims and tables and the rehearsal's (world/, rehearsal/),
#    each stage's time (their stage_times.txt, benchmarks/study_time.py) and what ran within its limit
#    (status.txt), each part's as soon as it ends.
# Without CUDA it says so and runs the smallest form of the world on the CPU (configs/gpu-smallest.yaml)
# with the rehearsal dry: the rehearsal of this script, not a GPU record. Exit status: 0 when every part
# ran to its end within its limit.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$repo/docs/gpu" work="gpu-check" wheelhouse="" cores="$(nproc)" world_s=330 rehearsal_s=210 rehearsal=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheelhouse) wheelhouse="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --cores) cores="$2"; shift 2 ;;
        --world-seconds) world_s="$2"; shift 2 ;;
        --rehearsal-seconds) rehearsal_s="$2"; shift 2 ;;
        --rehearsal) rehearsal="$2"; shift 2 ;;
        *) echo "gpu_check: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
case "$rehearsal" in ""|run|dry|skip) ;; *) echo "gpu_check: --rehearsal must be run, dry or skip, got $rehearsal" >&2; exit 2 ;; esac
for n in "$cores" "$world_s" "$rehearsal_s"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --cores and the time limits take a positive whole number, got $n" >&2; exit 2; }
done
if [ -n "$wheelhouse" ]; then
    # shellcheck source=../envs/install-offline.sh
    . "$repo/envs/install-offline.sh" "$wheelhouse" "$(mkdir -p "$work" && cd "$work" && pwd)/site"
fi
command -v orthrus >/dev/null || { echo "gpu_check: no orthrus command on the PATH (install the project, or give --wheelhouse)" >&2; exit 2; }
mkdir -p "$work" "$out"
work="$(cd "$work" && pwd)" out="$(cd "$out" && pwd)"
device="$(python3 -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')"
configs=("$repo/configs/gpu.yaml")
if [ "$device" = cuda ]; then
    if python3 -c 'import flash_attn' 2>/dev/null; then
        echo "decode: {attentions: [eager, sdpa, flash_attention_2]}" > "$work/flash.yaml"
        configs+=("$work/flash.yaml")
    fi
    rehearsal="${rehearsal:-run}"
else
    rehearsal="${rehearsal:-dry}"
    echo "gpu_check: no CUDA device here; running the smallest form of the GPU world on the CPU" \
         "(configs/gpu-smallest.yaml), the paper rehearsal: $rehearsal; a rehearsal of this script, not a GPU record" >&2
    echo "decode: {device: cpu}" > "$work/cpu.yaml"
    configs+=("$repo/configs/gpu-smallest.yaml" "$work/cpu.yaml")
fi

# the numerical environment, before anything runs
python3 - "$out/environment.json" "$device" <<'PY'
import json, os, platform, subprocess, sys
import torch
from orthrus.models.precision import configure, numerical_env
path, device = sys.argv[1:]
smi = None
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
except (OSError, subprocess.SubprocessError) as e:
    smi = f"nvidia-smi: {e}"
torch_defaults = {  # what a user's process gets before the study sets its flags (TF32 is a cell of its own)
    "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    "float32_matmul_precision": torch.get_float32_matmul_precision(),
}
configure("fp32")
env = {"device": device, "nvidia_smi": smi, "gpu_count": torch.cuda.device_count(),
       "cuda_runtime": torch.version.cuda, "cpu_count": os.cpu_count(), "platform": platform.platform(),
       "torch_defaults": torch_defaults, "study_fp32": numerical_env(dtype="fp32"),
       "note": None if device == "cuda" else "no CUDA device: the smallest form on the CPU, not a GPU record"}
if device == "cuda":
    env["study_fp32"]["device_name"] = torch.cuda.get_device_name()
open(path, "w").write(json.dumps(env, indent=2, default=str) + "\n")
PY

# run NAME SECONDS COMMAND...: the command under its limit (SIGINT first, so Snakemake stops its jobs
# and removes their partial outputs; KILL 30 s later); its status and wall time go to status.txt.
# `timeout` puts itself and the command in a process group of their own, which a terminal's ^C does not
# reach: an interrupt or TERM of this script is passed on to that group.
: > "$out/status.txt"
status=0 child=""
trap '[ -z "$child" ] || kill -INT -- "-$child" 2>/dev/null; exit 130' INT TERM
run() {
    local name="$1" limit="$2" start rc
    shift 2
    start=$(date +%s)
    set +e
    timeout --signal=INT --kill-after=30 "$limit" "$@" < /dev/null > "$out/$name.log" 2>&1 &
    child=$!
    wait "$child"
    rc=$?
    child=""
    set -e
    local verdict="ok"
    [ "$rc" = 0 ] || { verdict="failed (exit $rc)"; status=1; }
    [ "$rc" = 124 ] && verdict="over its limit of $limit s"
    echo "$name: $verdict, $(( $(date +%s) - start )) s (limit $limit s)" | tee -a "$out/status.txt"
}

# keep NAME SECONDS: what a part wrote goes into the record as soon as it ends (a machine taken back
# mid-check keeps what came before), with each stage's time
keep() {
    mkdir -p "$out/$1"
    for f in "$work/$1"/results/tables/*.csv; do [ -e "$f" ] && cp "$f" "$out/$1/"; done
    if [ -d "$work/$1/results/timing" ]; then
        timeout 60 python3 "$repo/benchmarks/study_time.py" --timing "$work/$1/results/timing" --budget "$2" \
            --cores "$cores" > "$out/$1/stage_times.txt" 2>&1 || true
    fi
}

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1
mkdir -p "$work/world"
run world "$world_s" snakemake -s "$repo/Snakefile" --directory "$work/world" --configfile "${configs[@]}" --cores "$cores"
keep world "$world_s"
case "$rehearsal" in
    run) run rehearsal "$rehearsal_s" bash "$repo/benchmarks/gpu_rehearsal.sh" "$work/rehearsal" --cores "$cores" ;;
    dry) run rehearsal "$rehearsal_s" bash "$repo/benchmarks/gpu_rehearsal.sh" "$work/rehearsal" --cores "$cores" -n ;;
    skip) echo "rehearsal: skipped" | tee -a "$out/status.txt" ;;
esac
keep rehearsal "$rehearsal_s"
echo "gpu_check: device $device; record in $out" >&2
cat "$out/status.txt" >&2
exit "$status"
