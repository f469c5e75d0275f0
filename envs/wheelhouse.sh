#!/usr/bin/env bash
# A wheelhouse for an offline GPU node (issue 52): every wheel the study needs on the node's Python,
# except what the node already has, to carry over and install there with envs/install-offline.sh.
#     bash envs/wheelhouse.sh OUT_DIR [--python 3.12] [--platform manylinux_2_28_x86_64]
#                                     [--exclude torch,nvidia-*,triton,numpy,scipy,pyarrow,matplotlib]
#                                     [--extras real] [--max-mb 60]
# Run it on a machine that reaches the package registry (bash >= 4.4, GNU tar; PYTHON, default
# python3, is the Python >= 3.10 with pip that resolves, downloads and builds). Why: a cluster's GPU nodes have no
# network but their own Python and their own torch (e.g. CPython 3.12, torch 2.11+cu130), numpy,
# scipy, pyarrow and matplotlib; a second torch next to the node's would be gigabytes and would
# not match its CUDA, so the wheelhouse leaves these to the node.
#   --python     the node's Python, X.Y (default 3.12); the wheels are CPython's (cpXY, abi3, none)
#   --platform   the node's newest platform tag (default manylinux_2_28_x86_64); a manylinux_2_N tag
#                brings every older glibc's tag with it (pip matches a wheel's N exactly)
#   --exclude    fnmatch patterns of package names the node has (default, replaced whole by the
#                option: torch,nvidia-*,triton,numpy,scipy,pyarrow,matplotlib); what only excluded
#                packages need is left out too (torch's nvidia-* wheels, triton, sympy, networkx,
#                matplotlib's pillow, contourpy, ...): the excluded packages enter the resolution as
#                empty stand-ins, so their own dependencies are never resolved; what a kept package
#                needs stays (sympy, networkx or pillow come back if one does)
#                (a leading + adds to the default: --exclude +pandas,scikit-learn)
#   --node       a file naming the node's packages (one a line: NAME, or NAME==VERSION as
#                `python3 -m pip list --format=freeze` writes them; # comments), added to --exclude
#                except what the study always carries (CARRY below: the libraries that load and run
#                the model, at constraints.txt's versions); default envs/gpu-node-packages.txt (this
#                workplace's H200 image); `none` for no list
#   --extras     the project's extras to carry (default real: gguf, for `teacher.source: gguf` and
#                the GGUF engines; add slurm for the SLURM executor plugin; "" for none)
#   --max-mb     the size limit of the project's git-tracked files plus the wheelhouse (default 60:
#                the working tree and what it carries reach a lent GPU machine in 64 MiB at most)
# It resolves the project (constraints.txt pins it) for the target Python and platform from wheels
# only; the few dependencies published only as source (rouge_score, langdetect, ...) are built here
# and must build pure-Python wheels. Snakemake's pulp loses its bundled cbc solver binaries (35 MB;
# snakemake schedules without them). OUT_DIR gets the wheels, requirements.txt and MANIFEST.txt
# (each wheel's name==version, the target, what was excluded and what the kept wheels ask of it,
# which install-offline.sh checks on the node). The project's git-tracked files plus the wheelhouse
# must stay under --max-mb: the script fails naming the size otherwise (the wheels stay in OUT_DIR).
# Cost: 1-2 minutes. With the default node list the wheels come to about 44 MB for CPython 3.12
# (transformers, lm-eval and the project itself are half of it); with --node none (torch and its
# numerics stack alone left to the node) about 105 MB, over the limit: name what the node has.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
limit_mb=60
target_python=3.12
platform=manylinux_2_28_x86_64
default_exclude="torch,nvidia-*,triton,numpy,scipy,pyarrow,matplotlib"
exclude="$default_exclude"
node_list="$root/envs/gpu-node-packages.txt"
# always carried, whatever the node has: they load and run the model, and their versions are the study's
carry="transformers,tokenizers,safetensors,huggingface-hub,accelerate"
extras=real
out=""

die() { echo "wheelhouse.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; }

while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --python|--platform|--exclude|--extras|--max-mb|--node)
            [ $# -ge 2 ] || die "option $1 needs a value"
            case "$1" in
                --python) target_python="$2" ;;
                --platform) platform="$2" ;;
                --exclude) exclude="$2" ;;
                --extras) extras="$2" ;;
                --max-mb) limit_mb="$2" ;;
                --node) node_list="$2" ;;
            esac
            shift 2 ;;
        --python=*) target_python="${1#*=}"; shift ;;
        --platform=*) platform="${1#*=}"; shift ;;
        --exclude=*) exclude="${1#*=}"; shift ;;
        --extras=*) extras="${1#*=}"; shift ;;
        --max-mb=*) limit_mb="${1#*=}"; shift ;;
        --node=*) node_list="${1#*=}"; shift ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) [ -z "$out" ] || die "one OUT_DIR only, got '$out' and '$1'"; out="$1"; shift ;;
    esac
done
[ -n "$out" ] || { usage >&2; die "OUT_DIR is missing"; }
[[ "$target_python" =~ ^3\.[0-9]+(\.[0-9]+)?$ ]] || die "--python '$target_python' is not a Python version like 3.12"
target_python="$(echo "$target_python" | cut -d. -f1,2)"
[[ "$platform" =~ ^[a-z0-9_]+$ ]] || die "--platform '$platform' is not a platform tag like manylinux_2_28_x86_64"
case "$exclude" in +*) exclude="$default_exclude,${exclude#+}" ;; esac
[[ "$exclude" =~ ^[A-Za-z0-9_.*?,-]*$ ]] || die "--exclude '$exclude' is not a comma-separated list of package names"
if [ "$node_list" != none ]; then
    [ -f "$node_list" ] || die "--node '$node_list': no such file (a list of the node's packages, or none)"
    node_names="$(sed -e 's/#.*//' -e 's/[=<>~! ;[].*//' -e 's/^[[:space:]]*//' "$node_list" | tr 'A-Z_.' 'a-z--' \
        | grep -v -x -F -e '' $(printf -- ' -e %s' ${carry//,/ }) | sort -u | paste -sd, -)" || true
    [[ "${node_names:-}" =~ ^[a-z0-9,-]*$ ]] || die "--node '$node_list' names something that is not a package name"
    [ -z "${node_names:-}" ] || exclude="$exclude,$node_names"
fi
[[ "$extras" =~ ^[A-Za-z0-9_,-]*$ ]] || die "--extras '$extras' is not a comma-separated list of extras"
[[ "$limit_mb" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--max-mb '$limit_mb' is not a number of MB"
command -v "$python" > /dev/null || die "no Python '$python' (set PYTHON)"
"$python" -m pip --version > /dev/null 2>&1 || die "$python has no pip"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "$python is older than 3.10 (the project's floor)"
case "$(cd "$(dirname "$out")" 2>/dev/null && pwd)/" in "$root"/*) echo "wheelhouse.sh: note: OUT_DIR is inside the repository" >&2 ;; esac
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/MANIFEST.txt" ]; then
    die "OUT_DIR '$out' exists, is not empty and holds no wheelhouse (MANIFEST.txt): choose another"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/built" "$work/stubs" "$work/dl" "$work/src"
cat > "$work/helper.py" <<'PY'
"""The wheelhouse's bookkeeping: platform tags, stand-in wheels, the resolution's graph, pulp, the manifest."""
import base64, csv, fnmatch, hashlib, io, json, os, re, subprocess, sys, time, zipfile  # noqa: E401

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
except ImportError:  # pip carries its own
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet


def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def patterns(text):
    return [canon(p.strip()) for p in text.split(",") if p.strip()]


def excluded(name, pats):
    return any(fnmatch.fnmatchcase(canon(name), p) for p in pats)


def wheel_name(fn):
    """(canonical name, version) from a wheel's file name."""
    parts = os.path.basename(fn)[: -len(".whl")].split("-")
    return canon(parts[0]), parts[1]


def platforms(tag):
    """pip takes --platform literally: manylinux_2_28 brings 2_27 ... 2_5 (and their legacy names)."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    m = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", tag)
    if m:
        tag = "manylinux_%d_%d_%s" % (*legacy[m.group(1)], m.group(2))
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if m:
        major, minor, arch = int(m.group(1)), int(m.group(2)), m.group(3)
        tags = []
        for n in range(minor, 4, -1):
            tags.append(f"manylinux_{major}_{n}_{arch}")
            tags += [f"{old}_{arch}" for old, v in legacy.items() if v == (major, n)]
        return tags
    m = re.fullmatch(r"musllinux_(\d+)_(\d+)_(\w+)", tag)
    if m:
        return [f"musllinux_{m.group(1)}_{n}_{m.group(3)}" for n in range(int(m.group(2)), -1, -1)]
    return [tag]


def marker_env(python, platform):
    system = ("Darwin", "darwin", "posix") if platform.startswith("macosx") else (
        ("Windows", "win32", "nt") if platform.startswith("win") else ("Linux", "linux", "posix"))
    machine = {"win_amd64": "AMD64", "win32": "x86", "win_arm64": "ARM64"}.get(platform)
    if machine is None:
        machine = re.sub(r"^(many|musl)linux_\d+_\d+_|^macosx_\d+_\d+_|^linux_", "", platform)
        machine = {"universal2": "arm64"}.get(machine, machine)
    return {"implementation_name": "cpython", "implementation_version": python + ".0", "os_name": system[2],
            "platform_machine": machine, "platform_python_implementation": "CPython", "platform_release": "",
            "platform_system": system[0], "platform_version": "", "python_full_version": python + ".0",
            "python_version": python, "sys_platform": system[1]}


def stubs(constraints, exclude, outdir):
    """An empty wheel for each excluded name that constraints.txt pins: the resolution takes it for
    the node's package and never looks at what the real one needs."""
    pats, pins = patterns(exclude), {}
    for line in open(constraints).read().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = (s.strip() for s in line.split("==", 1))
            pins[canon(name)] = (name, version)
    for key, (name, version) in sorted(pins.items()):
        if not excluded(key, pats):
            continue
        dist = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}"
        files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                 "Summary: the offline node's own package (a stand-in of envs/wheelhouse.sh)\n",
                 f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: envs/wheelhouse.sh\n"
                 "Root-Is-Purelib: true\nTag: py3-none-any\n"}
        record = [[p, "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode(),
                   str(len(t.encode()))] for p, t in files.items()] + [[f"{dist}.dist-info/RECORD", "", ""]]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(record)
        files[f"{dist}.dist-info/RECORD"] = buf.getvalue()
        with zipfile.ZipFile(os.path.join(outdir, f"{dist}-py3-none-any.whl"), "w") as z:
            for path, text in files.items():
                z.writestr(path, text)


def sdists(report):
    """The resolved packages that came as source, not as a wheel (name==version)."""
    for item in json.load(open(report))["install"]:
        info = item["download_info"]
        if "dir_info" in info or info["url"].endswith(".whl"):
            continue
        print(f"{item['metadata']['name']}=={item['metadata']['version']}")


def plan(report, root_wheel, extras, exclude, python, platform, out):
    """Walks the resolution from the project with the target's markers, stopping at excluded names:
    what it reaches is kept; excluded names a kept package asks for are the node's to provide."""
    items = {canon(i["metadata"]["name"]): i for i in json.load(open(report))["install"]}
    pats, env = patterns(exclude), marker_env(python, platform)
    root = wheel_name(root_wheel)[0]
    active, queue, node, missing = {root: set(patterns(extras))}, [root], {}, set()
    while queue:
        name = queue.pop()
        for text in items[name]["metadata"].get("requires_dist") or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in active[name] | {""}):
                continue
            dep = canon(req.name)
            if excluded(dep, pats):
                entry = node.setdefault(dep, {"name": req.name, "spec": SpecifierSet(""), "by": set()})
                entry["spec"] &= req.specifier
                entry["by"].add(items[name]["metadata"]["name"])
                continue
            if dep not in items:
                req.marker = None
                missing.add(str(req))
                continue
            wanted = {canon(e) for e in req.extras}
            if dep not in active or not wanted <= active[dep]:
                active[dep] = active.get(dep, set()) | wanted
                queue.append(dep)
    meta = lambda k: items[k]["metadata"]
    json.dump({
        "kept": {meta(k)["name"]: meta(k)["version"] for k in sorted(active)},
        "node": {e["name"]: {"spec": str(e["spec"]), "by": sorted(e["by"]),
                             "pinned": meta(k)["version"] if k in items else ""} for k, e in sorted(node.items())},
        "dropped": {meta(k)["name"]: meta(k)["version"] for k in sorted(items)
                    if k not in active and k not in node and not excluded(k, pats)},
        "excluded_unused": sorted(meta(k)["name"] for k in items if excluded(k, pats) and k not in node),
        "missing": sorted(missing),
    }, open(out, "w"), indent=1)


def strip_pulp(path):
    """Drops pulp's bundled cbc binaries (pulp/solverdir/cbc/*/cbc*) and their RECORD rows."""
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        drop = {i.filename for i in infos if "/solverdir/" in i.filename and not i.is_dir()
                and not i.filename.endswith((".py", ".txt"))}
        if not drop:
            return
        tmp = path + ".tmp"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info in infos:
                if info.filename in drop:
                    continue
                data = z.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    rows = [r for r in csv.reader(io.StringIO(data.decode())) if r and r[0] not in drop]
                    buf = io.StringIO()
                    csv.writer(buf, lineterminator="\n").writerows(rows)
                    data = buf.getvalue().encode()
                out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    os.replace(tmp, path)
    print(f"pulp: {len(drop)} solver binaries removed ({os.path.getsize(path) / 1e6:.1f} MB left)")


def tree_bytes(root):
    """The project's git-tracked files (without git: every file outside dot-folders)."""
    try:
        files = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        paths = [os.path.join(root, p) for p in files.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [os.path.join(d, f) for d, dirs, fs in os.walk(root) for f in fs
                 if not any(part.startswith(".") for part in os.path.relpath(d, root).split(os.sep) if part != ".")]
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def manifest(out, planfile, python, platform, tags, exclude, extras, root, limit_mb):
    p = json.load(open(planfile))
    wheels = sorted(f for f in os.listdir(out) if f.endswith(".whl"))
    names = [wheel_name(f) for f in wheels]
    dupes = sorted({n for n, _ in names if [m for m, _ in names].count(n) > 1})
    if dupes:
        sys.exit(f"wheelhouse.sh: two versions of {', '.join(dupes)} in {out}")
    kept = {canon(k): v for k, v in p["kept"].items()}
    have = dict(names)
    lost = sorted(f"{k}=={v}" for k, v in kept.items() if k not in have)
    extra = sorted(f"{k}=={v}" for k, v in have.items() if k not in kept)
    if lost or extra:
        sys.exit(f"wheelhouse.sh: the wheels do not match the resolution: missing {lost}, unexpected {extra}")
    wheel_bytes = sum(os.path.getsize(os.path.join(out, f)) for f in wheels)
    tree = tree_bytes(root)
    with open(os.path.join(out, "requirements.txt"), "w") as f:
        f.write("# pip install --no-index --find-links . -r requirements.txt (envs/install-offline.sh does it)\n")
        f.writelines(f"{n}=={v}\n" for n, v in names)
    lines = [
        "# orthrus-exactness wheelhouse for an offline node: made by envs/wheelhouse.sh, installed by envs/install-offline.sh",
        f"target-python: {python}",
        "target-implementation: cp",
        f"target-platform: {platform}",
        f"platform-tags: {tags}",
        f"extras: {extras}",
        f"exclude: {exclude}",
        f"made: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} with Python {sys.version.split()[0]}",
        f"wheels: {len(wheels)} ({wheel_bytes / 1e6:.1f} MB)",
        "",
        "[wheels] name==version file",
    ]
    for f, (n, v) in zip(wheels, names):
        note = "  # cbc solver binaries removed: snakemake schedules without them" if n == "pulp" else ""
        lines.append(f"{n}=={v} {f}{note}")
    lines += ["", "[node] excluded packages the wheels need: name, what they ask of it, who asks (install-offline.sh checks each)"]
    for n, e in p["node"].items():
        lines.append(f"{canon(n)} {e['spec'] or '*'} {','.join(canon(b) for b in e['by'])}")
    lines += ["", "[dropped] resolved but not needed on the target (only excluded packages or this machine's markers ask for them)"]
    lines += [f"{canon(n)}=={v}" for n, v in p["dropped"].items()]
    with open(os.path.join(out, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = wheel_bytes + tree + sum(os.path.getsize(os.path.join(out, f)) for f in ("MANIFEST.txt", "requirements.txt"))
    print(f"wheelhouse: {len(wheels)} wheels, {wheel_bytes / 1e6:.1f} MB in {out}; with the project's "
          f"git-tracked files ({tree / 1e6:.1f} MB): {total / 1e6:.1f} MB (limit {limit_mb:g} MB)")
    print("the node provides:", ", ".join(f"{canon(n)}{e['spec']}" for n, e in p["node"].items()) or "nothing")
    if total > limit_mb * 1e6:
        sys.exit(f"wheelhouse.sh: the project tree and the wheelhouse come to {total / 1e6:.1f} MB, over the "
                 f"{limit_mb:g} MB limit: the largest wheels are "
                 + ", ".join(f"{f} ({os.path.getsize(os.path.join(out, f)) / 1e6:.1f} MB)" for f in
                             sorted(wheels, key=lambda f: -os.path.getsize(os.path.join(out, f)))[:5]))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "platforms":
        print(" ".join(platforms(args[0])))
    elif cmd == "extras":
        try:
            import tomllib
        except ImportError:
            from pip._vendor import tomli as tomllib
        known = tomllib.load(open(args[0], "rb"))["project"].get("optional-dependencies", {})
        bad = [e for e in args[1].split(",") if e and e not in known]
        if bad:
            sys.exit(f"wheelhouse.sh: unknown extra {', '.join(bad)} (pyproject.toml has {', '.join(known)})")
    elif cmd == "stubs":
        stubs(*args)
    elif cmd == "sdists":
        sdists(*args)
    elif cmd == "plan":
        plan(*args)
    elif cmd == "strip-pulp":
        strip_pulp(*args)
    elif cmd == "manifest":
        manifest(*args[:7], args[7], float(args[8]))
    elif cmd == "wheel-name":
        print("%s %s" % wheel_name(args[0]))
PY
helper() { "$python" "$work/helper.py" "$@"; }
# pip's output goes to a log; on failure its errors (less this machine's index warnings) are shown
pip_logged() {
    local log="$1"; shift
    if ! "$python" -m pip --disable-pip-version-check "$@" > "$log" 2>&1; then
        grep -v -e '^WARNING: Location' -e '^ *━' "$log" | grep -E -A12 'ERROR|error:|conflict is caused' | head -60 >&2 || tail -30 "$log" >&2
        return 1
    fi
}

helper extras "$root/pyproject.toml" "$extras"
read -r -a tags <<< "$(helper platforms "$platform")"
platform_args=(--only-binary=:all: --python-version "$target_python" --implementation cp)
for t in "${tags[@]}"; do platform_args+=(--platform "$t"); done
constraints="$root/constraints.txt"
n_excluded="$(tr ',' '\n' <<< "$exclude" | sort -u | grep -c .)" || true
echo "wheelhouse: CPython $target_python on $platform, extras '${extras}', leaving $n_excluded packages to the node (MANIFEST.txt: exclude)"

# 1. The project's wheel, from the files git knows (tracked, or new and not ignored), not from
#    whatever else lies in the checkout (a virtual environment, results, an OUT_DIR inside it).
if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
    (cd "$root" && git ls-files -z -c -o --exclude-standard -- pyproject.toml setup.py setup.cfg MANIFEST.in README.md 'LICENSE*' orthrus \
        | xargs -0 -r sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh | tar --null -T - -cf -) | tar -xf - -C "$work/src"
else
    (cd "$root" && tar --exclude=__pycache__ -cf - pyproject.toml README.md orthrus) | tar -xf - -C "$work/src"
fi
pip_logged "$work/wheel.log" wheel --no-deps -w "$work/built" "$work/src" || die "the project's wheel did not build"
project_wheel="$(ls "$work"/built/*.whl)"
echo "wheelhouse: built $(basename "$project_wheel")"
req="$project_wheel"
[ -z "$extras" ] || req="$project_wheel[$extras]"

# 2. Stand-ins for the excluded packages that constraints.txt pins.
helper stubs "$constraints" "$exclude" "$work/stubs"
stub_wheels=("$work"/stubs/*.whl)
[ -e "${stub_wheels[0]}" ] || stub_wheels=()

# 3. Dependencies published only as source: resolved for this machine (the target's resolution is
#    wheels only), built here; each must build a pure-Python wheel to serve another platform.
pip_logged "$work/native.log" install --dry-run --ignore-installed --report "$work/native.json" \
    -c "$constraints" "${stub_wheels[@]}" "$req" || die "the project's dependencies do not resolve on this machine ($python)"
mapfile -t sources < <(helper sdists "$work/native.json")
if [ ${#sources[@]} -gt 0 ]; then
    echo "wheelhouse: building wheels of ${sources[*]} (published as source only)"
    pip_logged "$work/sdist.log" wheel --no-deps -w "$work/built" "${sources[@]}" || die "could not build ${sources[*]}"
fi
for w in "$work"/built/*.whl; do
    case "$w" in *-none-any.whl) ;; *) die "no wheel of $(helper wheel-name "$w" | sed 's/ /==/') for CPython $target_python on $platform: its source builds a platform wheel ($(basename "$w")) only for this machine" ;; esac
done

# 4. The target's resolution, from wheels only. pip evaluates markers with this machine's Python;
#    the walk below evaluates them for the target and adds what pip left out, then resolves again.
extra_reqs=()
for attempt in 1 2 3; do
    if ! pip_logged "$work/target.log" install --dry-run --ignore-installed --report "$work/target.json" \
        --target "$work/target" "${platform_args[@]}" -c "$constraints" --find-links "$work/built" \
        "${stub_wheels[@]}" "$req" "${extra_reqs[@]}"; then
        culprits="$(sed -n -e 's/.*No matching distribution found for \([^ ;]*\).*/\1/p' \
            -e 's/.*The user requested (constraint) \([^ ;]*\).*/\1/p' "$work/target.log" | sort -u | tr '\n' ' ')"
        die "no wheel for CPython $target_python on $platform of ${culprits:-a package named above}(pip resolves the target from wheels only; exclude it if the node has it)"
    fi
    helper plan "$work/target.json" "$project_wheel" "$extras" "$exclude" "$target_python" "$platform" "$work/plan.json"
    mapfile -t missing < <("$python" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["missing"]))' "$work/plan.json" | sed '/^$/d')
    [ ${#missing[@]} -gt 0 ] || break
    [ "$attempt" -lt 3 ] || die "the target needs ${missing[*]}, which the resolution keeps leaving out"
    echo "wheelhouse: the target also needs ${missing[*]} (markers for Python $target_python)"
    extra_reqs+=("${missing[@]}")
done

# 5. The kept wheels: built here or downloaded for the target.
mkdir -p "$out"
rm -f "$out"/*.whl "$out/MANIFEST.txt" "$out/requirements.txt"
"$python" - "$work/plan.json" "$work/built" "$work/dl.txt" "$out" <<'PY'
import json, os, re, shutil, sys
plan, built, dl, out = sys.argv[1:]
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()
local = {canon(f.split("-")[0]): f for f in os.listdir(built)}
with open(dl, "w") as f:
    for name, version in json.load(open(plan))["kept"].items():
        if canon(name) in local:
            shutil.copy(os.path.join(built, local[canon(name)]), out)
        else:
            f.write(f"{name}=={version}\n")
PY
if [ -s "$work/dl.txt" ]; then
    pip_logged "$work/download.log" download --no-deps "${platform_args[@]}" -d "$out" -r "$work/dl.txt" \
        || die "a wheel named above could not be downloaded for CPython $target_python on $platform"
fi
for w in "$out"/pulp-*.whl "$out"/PuLP-*.whl; do [ -e "$w" ] && helper strip-pulp "$w"; done

# 6. The manifest, the requirements, the size.
helper manifest "$out" "$work/plan.json" "$target_python" "$platform" "${tags[*]}" "$exclude" "$extras" "$root" "$limit_mb"
