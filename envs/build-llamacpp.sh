#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (issue 45), CPU only, from the llama.cpp tree vendored in the
# registry's llama-cpp-python 0.3.36 source archive (no network beyond the package registry):
#     bash envs/build-llamacpp.sh [DIR]        # default: .llamacpp in the repository root
# then point the workflow at it: config `engines.llamacpp_server: .llamacpp/bin/llama-server`
# (or ORTHRUS_LLAMACPP_SERVER). DIR/build.json records the version, the archive's sha256, the
# compiler and the CMake flags (each engine file's env names them). Re-running on a built DIR only
# re-checks it. Cost here: a 76 MB download, then 6.5 minutes of compile on 2 cores (206 steps).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/.llamacpp}"
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
python="${PYTHON:-python3}"
# Native code for this CPU is what a user's own build gets; OpenMP off keeps one thread pool
# (the server's own), the web UI and its download off, no curl (models are local files).
flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_OPENMP=OFF
       -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF)
if [ -x "$dir/bin/llama-server" ] && [ -f "$dir/build.json" ]; then
    "$dir/bin/llama-server" --version 2>&1 | head -2
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"  # a pip of its own: the system Python may have none
"$work/venv/bin/pip" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
archive="$work/llama_cpp_python-$version.tar.gz"
echo "$sha256  $archive" | sha256sum -c --quiet
tar -xzf "$archive" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
generator="Unix Makefiles"
command -v ninja > /dev/null && generator=Ninja
cmake -S "$src" -B "$work/build" -G "$generator" "${flags[@]}" > "$work/cmake.log"
cmake --build "$work/build" --target llama-server -j "$(nproc)"
mkdir -p "$dir/bin"
cp "$work/build/bin/llama-server" "$dir/bin/llama-server.tmp" && mv "$dir/bin/llama-server.tmp" "$dir/bin/llama-server"
# the converter (convert_hf_to_gguf.py and its gguf-py) for the GGUF files the study converts
rm -rf "$dir/convert" && mkdir -p "$dir/convert"
cp -r "$src/convert_hf_to_gguf.py" "$src/gguf-py" "$src/conversion" "$dir/convert/"
"$python" - "$dir/build.json" "$version" "$sha256" "$(gcc --version | head -1)" "${flags[*]}" <<'PY'
import json, sys
path, version, sha, compiler, flags = sys.argv[1:]
json.dump({"engine": "llama.cpp", "source": f"llama-cpp-python=={version} sdist, vendor/llama.cpp",
           "sha256": sha, "compiler": compiler, "cmake_flags": flags.split()}, open(path, "w"), indent=1)
PY
"$dir/bin/llama-server" --version 2>&1 | head -2
