#!/usr/bin/env bash
# Rehearse configs/paper.yaml on this CPU: build the stand-ins, then run the paper DAG for real
# with configs/rehearsal.yaml on top (docs/USAGE.md, "Rehearsing the paper scale").
#   bash workflow/scripts/rehearse.sh [WORKDIR] [snakemake options...]
# WORKDIR (default: rehearsal/) gets standins/ and results/; nothing reaches the network.
# REHEARSAL_EXTRA_CONFIG: one more config file read last (benchmarks/gpu_rehearsal.sh: device cuda).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-rehearsal}"
shift || true
mkdir -p "$work"
cd "$work"
if [ ! -f standins/.complete ]; then
    rm -rf standins
    orthrus rehearsal-standins --out standins
    touch standins/.complete
fi
# offline, as a cluster's compute nodes are; IFEval's sentence splitter from the stand-in data
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1 NLTK_DATA="$PWD/standins/nltk_data"
configs=("$repo/configs/paper.yaml" "$repo/configs/rehearsal.yaml" ${REHEARSAL_EXTRA_CONFIG:+"$REHEARSAL_EXTRA_CONFIG"})
snakemake -s "$repo/Snakefile" --directory . --configfile "${configs[@]}" --cores "${REHEARSAL_CORES:-2}" "$@"
case " $* " in
    *" -n "*|*" --dry-run "*) ;;
    *) snakemake -s "$repo/Snakefile" --directory . --configfile "${configs[@]}" --report results/report.html ;;
esac
