#!/usr/bin/env bash
# Installs the study on an offline node from a wheelhouse of envs/wheelhouse.sh (issue 52), next
# to the node's own Python and its own torch, numpy, ... (never touched: the wheelhouse has none).
#     bash envs/install-offline.sh WHEELHOUSE [TARGET_DIR]     # prints the two export lines
#     source envs/install-offline.sh WHEELHOUSE [TARGET_DIR]   # exports them in this shell
# TARGET_DIR defaults to .offline-site in the repository root; PYTHON (default python3) is the
# node's Python, the one the wheelhouse was made for (MANIFEST.txt's target-python). Why: the node
# has no network, so everything comes from the wheelhouse (`pip install --no-index --no-deps
# --target`), and PYTHONPATH, not a virtual environment, joins it to the node's site-packages.
# Steps: checks that the node has every package the wheelhouse left out and the wheels need
# (MANIFEST.txt's [node], each importable at a version the wheels accept: a clear error names each
# one missing), installs every wheel of MANIFEST.txt into a fresh folder, checks that each installed
# package finds what it requires there or on the node, lets the folder replace TARGET_DIR, writes
# TARGET_DIR/bin/orthrus and TARGET_DIR/bin/snakemake (`python3 -m orthrus|snakemake` with
# PYTHONPATH set; the workflow's jobs call `orthrus`), and checks that `import orthrus, snakemake,
# transformers`, `orthrus --help` and `snakemake --version` work. Nothing is fetched: pip runs with --no-index
# and without any pip configuration or PIP_* variable.
if [ -n "${BASH_SOURCE[0]:-}" ] && [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # sourced: run as a script (its `set -e` and `exit` stay out of this shell), then export
    if _orthrus_offline_exports="$(bash "${BASH_SOURCE[0]}" "$@")"; then
        eval "$_orthrus_offline_exports"
        unset _orthrus_offline_exports
        echo "install-offline.sh: PYTHONPATH and PATH exported" >&2
        return 0
    else
        unset _orthrus_offline_exports
        return 1
    fi
fi
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"

die() { echo "install-offline.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^if \[/p' "$0" | sed -n 's/^# \{0,1\}//p'; }

args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --) shift; args+=("$@"); break ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) args+=("$1"); shift ;;
    esac
done
[ ${#args[@]} -ge 1 ] || { usage >&2; die "WHEELHOUSE is missing"; }
[ ${#args[@]} -le 2 ] || die "too many arguments: ${args[*]:2} (WHEELHOUSE [TARGET_DIR])"
wheelhouse="${args[0]}"
target="${args[1]:-$root/.offline-site}"
[ -d "$wheelhouse" ] || die "no wheelhouse folder '$wheelhouse'"
wheelhouse="$(cd "$wheelhouse" && pwd)"
[ -f "$wheelhouse/MANIFEST.txt" ] || die "'$wheelhouse' has no MANIFEST.txt: make it with envs/wheelhouse.sh"
py="$(command -v "$python")" || die "no Python '$python' on this node (set PYTHON)"
"$py" -m pip --version > /dev/null 2>&1 || die "$py has no pip (python3 -m pip)"
mkdir -p "$(dirname "$target")"
target="$(cd "$(dirname "$target")" && pwd)/$(basename "$target")"
marker=".orthrus-offline-site"
if [ -e "$target" ] && [ -n "$(ls -A "$target")" ] && [ ! -f "$target/$marker" ]; then
    die "TARGET_DIR '$target' exists, is not empty and is no offline site of this script: choose another"
fi
# no pip configuration, no PIP_* variable (an index, find-links or constraints of the node's)
pip_offline() { PIP_CONFIG_FILE=/dev/null "$py" -m pip --isolated --disable-pip-version-check --no-input "$@"; }

# 1. The manifest against this Python and the wheelhouse; what the node must have.
"$py" - "$wheelhouse" <<'PY'
import importlib.metadata as md, os, re, sys

try:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
except ImportError:  # pip carries its own
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.version import Version

house = sys.argv[1]
head, sections, section = {}, {}, None
for line in open(os.path.join(house, "MANIFEST.txt")).read().splitlines():
    line = line.split("  #", 1)[0].rstrip()
    if not line or line.startswith("#"):
        continue
    if line.startswith("["):
        section = sections.setdefault(line[1 : line.index("]")], [])
    elif section is None:
        key, _, value = line.partition(":")
        head[key.strip()] = value.strip()
    else:
        section.append(line.split())
want, have = head.get("target-python", "?"), "%d.%d" % sys.version_info[:2]
errors = []
if want != have:
    errors.append(f"the wheelhouse is for Python {want}, {sys.executable} is Python {have} (set PYTHON)")
files = [f for _, f in sections.get("wheels", [])]
names = [re.sub(r"[-_.]+", "-", n.split("==")[0]).lower() for n, _ in sections.get("wheels", [])]
lost = [f for f in files if not os.path.isfile(os.path.join(house, f))]
if lost:
    errors.append(f"MANIFEST.txt lists wheels the wheelhouse lacks: {', '.join(lost)}")
dupes = sorted({n for n in names if names.count(n) > 1})
if dupes:
    errors.append(f"two versions of {', '.join(dupes)} in MANIFEST.txt")


def import_name(dist, name):
    """The distribution's own module: its name if it has one of that name, else its first top-level one."""
    guess, top = name.replace("-", "_"), []
    if dist is not None:
        top = (dist.read_text("top_level.txt") or "").split() or sorted(
            {str(f).split("/")[0].removesuffix(".py") for f in dist.files or [] if str(f).endswith(".py")}
        )
    top = [t for t in top if not t.startswith("_") and "." not in t]
    return guess if guess in top or not top else top[0]


missing = []
for name, spec, by in (row + ["*", "?"][len(row) - 1 :] for row in sections.get("node", [])):
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        dist = None
    wanted = "" if spec == "*" else spec
    try:
        __import__(import_name(dist, name))
    except Exception as e:  # noqa: BLE001  # an ImportError, or a package that breaks on import
        missing.append(f"{name}{wanted} (needed by {by}): {type(e).__name__}: {e}".rstrip(": "))
        continue
    if dist is not None and wanted and not SpecifierSet(wanted).contains(Version(dist.version), prereleases=True):
        missing.append(f"{name}{wanted} (needed by {by}): the node has {dist.version}")
if missing:
    errors.append(
        f"the node's Python ({sys.executable}) lacks packages the wheelhouse leaves to it (MANIFEST.txt [node]):\n  "
        + "\n  ".join(missing)
    )
if errors:
    sys.exit("install-offline.sh: " + "\ninstall-offline.sh: ".join(errors))
PY
mapfile -t wheels < <(sed -n '/^\[wheels\]/,/^$/p' "$wheelhouse/MANIFEST.txt" | awk 'NR > 1 && NF >= 2 {print $2}')
[ ${#wheels[@]} -gt 0 ] || die "MANIFEST.txt lists no wheels"
echo "install-offline.sh: the node has what the wheelhouse leaves to it; installing ${#wheels[@]} wheels into $target" >&2

# 2. The wheels, into a fresh folder next to TARGET_DIR, which replaces it once checked.
stage="$(mktemp -d "$target.new.XXXXXX")"
trap 'rm -rf "$stage" "$target.old"' EXIT
(cd "$wheelhouse" && pip_offline install --no-index --no-deps --no-compile --no-cache-dir --no-warn-script-location \
    --target "$stage" "${wheels[@]}") > "$stage.log" 2>&1 || { tail -20 "$stage.log" >&2; rm -f "$stage.log"; die "pip could not install the wheels (above)"; }
rm -f "$stage.log"
cp "$wheelhouse/MANIFEST.txt" "$stage/$marker"

# 3. Each installed package finds what it requires (in the new site or on the node), and the
#    node's own packages (torch, ...) still find theirs where the site now shadows one.
PYTHONPATH="$stage${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$stage" <<'PY' || die "the offline site would not work on this node (above)"
import importlib.metadata as md, os, re, sys

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

site = os.path.realpath(sys.argv[1])
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()
extras, node, section = {}, [], None
for line in open(os.path.join(site, ".orthrus-offline-site")):
    if line.startswith("extras:"):
        extras["orthrus-exactness"] = {e for e in line.split(":", 1)[1].strip().split(",") if e}
    elif line.startswith("["):
        section = line[1 : line.index("]")]
    elif section == "node" and line.strip():
        node.append(line.split()[0])


def in_site(dist):
    return os.path.realpath(str(dist.locate_file(""))) == site


def unmet(dist, ours):
    """What `dist` requires and does not find; for a node package, only where the site shadows it."""
    name = canon(dist.metadata["Name"])
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras.get(name, set()) | {""}):
            continue
        try:
            found = md.distribution(req.name)
        except md.PackageNotFoundError:
            if ours:
                yield f"{name} needs {req.name}{req.specifier}: neither the wheelhouse nor the node has it"
            continue
        if req.specifier and not req.specifier.contains(Version(found.version), prereleases=True):
            if ours:
                yield f"{name} needs {req.name}{req.specifier}: found {found.version}"
            elif in_site(found):
                yield f"the node's {name} needs {req.name}{req.specifier}, the wheelhouse's {found.version} hides the node's"


problems = [p for dist in md.distributions(path=[site]) for p in unmet(dist, True)]
for name in node:
    try:
        problems += unmet(md.distribution(name), False)
    except md.PackageNotFoundError:
        pass
if problems:
    sys.exit("install-offline.sh: " + "\ninstall-offline.sh: ".join(problems))
PY
[ -f "$stage/orthrus/__main__.py" ] || die "the wheelhouse's project wheel has no orthrus/__main__.py"
rm -rf "$target.old"
[ ! -e "$target" ] || mv "$target" "$target.old"
mv "$stage" "$target"
chmod 755 "$target"

# 4. The commands: the node's Python, this site first on its path.
mkdir -p "$target/bin"
for module in orthrus snakemake; do
    cat > "$target/bin/$module" <<SH
#!/bin/sh
# envs/install-offline.sh: \`$module\` on the node's Python with the offline site first on its path
PYTHONPATH=$(printf %q "$target")\${PYTHONPATH:+:\$PYTHONPATH} exec $(printf %q "$py") -m $module "\$@"
SH
    chmod 755 "$target/bin/$module"
done
exports="$(printf 'export PYTHONPATH=%q${PYTHONPATH:+:$PYTHONPATH}\nexport PATH=%q:$PATH\n' "$target" "$target/bin")"

# 5. The checks, as the caller will run them.
(
    eval "$exports"
    cd "$target"  # not the repository: its orthrus/ would hide the installed one
    "$py" -c "import orthrus, snakemake, transformers" || die "python3 -c 'import orthrus, snakemake, transformers' fails (above)"
    [ "$(command -v orthrus)" = "$target/bin/orthrus" ] || die "orthrus on the PATH is $(command -v orthrus), not $target/bin/orthrus"
    orthrus --help > /dev/null || die "orthrus --help fails (above)"
    version="$(snakemake --version)" || die "snakemake --version fails (above)"
    echo "install-offline.sh: installed; orthrus --help works, snakemake $version" >&2
)
echo "install-offline.sh: run these two lines (or source this script instead of running it):" >&2
echo "$exports"
