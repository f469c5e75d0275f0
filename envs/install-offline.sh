#!/usr/bin/env bash
# Installs the study on an offline node from a wheelhouse of envs/wheelhouse.sh (issue 52), next
# to the node's own Python and its own torch, numpy, ... (never touched: the wheelhouse has none).
#     bash envs/install-offline.sh WHEELHOUSE [TARGET_DIR]     # prints the two export lines
#     source envs/install-offline.sh WHEELHOUSE [TARGET_DIR]   # exports them in this shell
# TARGET_DIR defaults to .offline-site in the repository root; PYTHON (default python3) is the
# node's Python, the one the wheelhouse was made for (MANIFEST.txt's target-python). Nothing is
# fetched: pip installs with --no-index, and PYTHONPATH, not a virtual environment, joins the site to
# the node's packages. It first checks that the node has what the wheelhouse leaves to it (a clear
# error names each one missing or too old), then installs into a fresh folder, checks it with
# `pip check`, puts bin/orthrus and bin/snakemake in it and runs them. The logic is
# envs/offline_install.py's.
if [ -n "${BASH_SOURCE[0]:-}" ] && [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # sourced: run as a script (its `exit` stays out of this shell), then export
    if _orthrus_offline_exports="$(bash "${BASH_SOURCE[0]}" "$@")"; then
        eval "$_orthrus_offline_exports"
        unset _orthrus_offline_exports
        echo "install-offline.sh: PYTHONPATH and PATH exported" >&2
        return 0
    fi
    unset _orthrus_offline_exports
    return 1
fi
set -euo pipefail
python="${PYTHON:-python3}"
case "${1:-}" in -h|--help) sed -n '2,/^if \[/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;; esac
py="$(command -v "$python")" || { echo "install-offline.sh: no Python '$python' on this node (set PYTHON)" >&2; exit 2; }
exec "$py" "$(dirname "$0")/offline_install.py" "$@"
