#!/usr/bin/env bash
# The paper rehearsal on a GPU: configs/paper.yaml + configs/rehearsal.yaml with device cuda, bf16
# and fp32, every attention kernel this machine has (eager, sdpa, and flash_attention_2 where the
# flash_attn package is installed); prints the exactness and TPF tables with the date and device.
# Without CUDA it says so and runs the same grid on the CPU (the fallback tests/ checks).
#   bash benchmarks/gpu_rehearsal.sh [WORKDIR] [snakemake options...]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-gpu-rehearsal}"
shift || true
mkdir -p "$work"
read -r device kernels name < <(python - <<'PY'
import importlib.util, torch
cuda = torch.cuda.is_available()
kernels = ["eager", "sdpa"] + (["flash_attention_2"] if cuda and importlib.util.find_spec("flash_attn") else [])
print("cuda" if cuda else "cpu", ",".join(kernels), (torch.cuda.get_device_name() if cuda else "CPU").replace(" ", "_"))
PY
)
[ "$device" = cuda ] || echo "gpu_rehearsal: no CUDA device here; running the same grid on the CPU" >&2
overlay="$(cd "$work" && pwd)/gpu.yaml"
list="[${kernels//,/, }]"
cat > "$overlay" <<YAML
decode: {device: $device, precisions: [bf16, fp32], attentions: $list}
tpf: {precisions: [bf16], attentions: $list}
analysis: {ppl_attention: eager}
benchmarks: {enabled: false}
YAML
REHEARSAL_EXTRA_CONFIG="$overlay" bash "$repo/workflow/scripts/rehearse.sh" "$work" "$@"
case " $* " in *" -n "*|*" --dry-run "*) exit 0 ;; esac
echo "# GPU rehearsal, $(date -u +%Y-%m-%d), device: ${name//_/ } ($device), kernels: $kernels"
for t in match_overall tpf_by_domain; do
    echo; echo "## $t"; cat "$work/results/tables/$t.md"
done
