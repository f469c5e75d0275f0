"""Installs the study from a wheelhouse of envs/wheelhouse.py on an offline node (issue 52), next to the
node's own Python and its own torch, numpy, ... (never touched: the wheelhouse has none); run through
envs/install-offline.sh. Standard library and pip only (`packaging` is pip's own copy where the node has
none): the node's bare Python runs it.

It checks that the node has every package the wheelhouse left out and the wheels need (MANIFEST.txt's
[node], each importable at a version the wheels accept), installs every wheel of MANIFEST.txt with
`pip install --no-index --no-deps --target` into a fresh folder, checks it with `pip check` against the
node's packages, lets it replace TARGET_DIR, writes TARGET_DIR/bin/orthrus and bin/snakemake
(`python3 -m ...` with PYTHONPATH set: the workflow's jobs call `orthrus`), runs `import orthrus,
snakemake, transformers`, `orthrus --help` and `snakemake --version` from it, and prints the two export
lines. pip runs without any pip configuration or PIP_* variable.
"""

import argparse
import importlib.metadata as md
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
except ImportError:  # a node's bare Python: pip carries its own
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
SITE_MARK = ".orthrus-offline-site"
__all__ = ["ROOT", "Parser", "Requirement", "SpecifierSet", "canon", "default_environment", "fail", "run"]


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line naming what is wrong, not argparse's usage block
        sys.exit(f"{self.prog}: {message} (see --help)")


def fail(prog: str, message: str):
    sys.exit(f"{prog}: {message}")


def run(prog: str, cmd: list, what: str, **kw) -> str:
    """`cmd`'s output; on failure its last error lines (less this machine's index warnings) and `what`."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        lines = [line for line in (r.stdout + r.stderr).splitlines() if "is ignored: it is neither" not in line]
        print("\n".join(lines[-40:]), file=sys.stderr)
        fail(prog, what)
    return r.stdout


def read_manifest(path: Path) -> tuple[dict, dict]:
    """MANIFEST.txt's head (key: value) and its sections ([name] rows, split on blanks)."""
    head, sections, section = {}, {}, None
    for line in path.read_text().splitlines():
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
    return head, sections


def import_name(dist, name: str) -> str:
    """The distribution's own module: its name if it has one of that name, else its first top-level one."""
    guess, top = name.replace("-", "_"), []
    if dist is not None:
        top = (dist.read_text("top_level.txt") or "").split() or sorted(
            {str(f).split("/")[0].removesuffix(".py") for f in dist.files or [] if str(f).endswith(".py")}
        )
    top = [t for t in top if not t.startswith("_") and "." not in t]
    return guess if guess in top or not top else top[0]


def node_lacks(rows: list) -> list[str]:
    """Each [node] row (name, spec, requirers) the node's Python cannot import at a version the wheels accept."""
    missing = []
    for name, spec, by in (row + ["*", "?"][len(row) - 1 :] for row in rows):
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
    return missing


def check_house(house: Path) -> list[str]:
    """The wheel files of the manifest, once it is found to fit this Python and this node."""
    head, sections = read_manifest(house / "MANIFEST.txt")
    errors, want, have = [], head.get("target-python", "?"), "{}.{}".format(*sys.version_info[:2])
    if want != have:
        errors.append(f"the wheelhouse is for Python {want}, {sys.executable} is Python {have} (set PYTHON)")
    files = [row[1] for row in sections.get("wheels", []) if len(row) > 1]
    lost = [f for f in files if not (house / f).is_file()]
    if lost:
        errors.append(f"MANIFEST.txt lists wheels the wheelhouse lacks: {', '.join(lost)}")
    names = [canon(row[0].split("==")[0]) for row in sections.get("wheels", [])]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        errors.append(f"two versions of {', '.join(dupes)} in MANIFEST.txt")
    if not files:
        errors.append("MANIFEST.txt lists no wheels")
    missing = node_lacks(sections.get("node", []))
    if missing:
        errors.append(
            f"the node's Python ({sys.executable}) lacks packages the wheelhouse leaves to it (MANIFEST.txt [node]):\n  "
            + "\n  ".join(missing)
        )
    if errors:
        fail("install-offline.sh", "\ninstall-offline.sh: ".join(errors))
    return files


def pip_offline() -> tuple[list, dict]:
    """pip on this Python without any pip configuration or PIP_* variable (an index, find-links or
    constraints of the node's): nothing is fetched."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull)
    return [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input"], env


def site_problems(site: Path) -> list[str]:
    """`pip check` on the node's Python with the new site first on its path: what the site's packages
    require and do not find, and the node's packages that the site now shadows at a version they refuse."""
    pip, env = pip_offline()
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    r = subprocess.run([*pip, "check"], capture_output=True, text=True, env=env)
    if r.returncode not in (0, 1):  # 1: it found problems; anything else: pip check itself failed
        fail("install-offline.sh", f"pip check failed:\n{r.stderr[-2000:]}")
    lines = r.stdout.splitlines()
    ours = {canon(d.metadata["Name"]) for d in md.distributions(path=[str(site)])}
    problems = []
    for line in lines:
        m = re.match(r"(\S+) \S+ (?:requires|has requirement|is not supported)(?:.*, but you have (\S+) )?", line)
        if m and (canon(m.group(1)) in ours or (m.group(2) and canon(m.group(2)) in ours)):
            problems.append(
                line if canon(m.group(1)) in ours else f"the node's {line} (the wheelhouse's hides the node's)"
            )
    return problems


def write_commands(target: Path) -> str:
    """TARGET_DIR/bin/orthrus and snakemake (the workflow's jobs call `orthrus`), and the two export lines."""
    (target / "bin").mkdir(exist_ok=True)  # pip put the wheels' console scripts there; two are replaced
    for module in ("orthrus", "snakemake"):
        shim = target / "bin" / module
        shim.write_text(
            "#!/bin/sh\n"
            f"# envs/install-offline.sh: `{module}` on the node's Python with the offline site first on its path\n"
            f'PYTHONPATH={shlex.quote(str(target))}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(sys.executable)} -m {module} "$@"\n'
        )
        shim.chmod(0o755)
    return (
        f"export PYTHONPATH={shlex.quote(str(target))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"export PATH={shlex.quote(str(target / 'bin'))}:$PATH\n"
    )


def try_commands(target: Path) -> str:
    """The checks as the caller will run them, from TARGET_DIR (the repository's orthrus/ would hide the site's)."""
    env = {**os.environ, "PATH": f"{target / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [os.environ.get("PYTHONPATH")])])
    found = shutil.which("orthrus", path=env["PATH"])
    if found != str(target / "bin" / "orthrus"):
        fail("install-offline.sh", f"orthrus on the PATH is {found}, not {target / 'bin' / 'orthrus'}")
    for cmd in (
        [sys.executable, "-c", "import orthrus, snakemake, transformers"],
        ["orthrus", "--help"],
        ["snakemake", "--version"],
    ):
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=target, env=env)
        if r.returncode != 0:
            fail("install-offline.sh", f"{' '.join(cmd)} fails:\n{r.stderr[-2000:]}")
    return r.stdout.strip()


def install(argv: list) -> None:
    p = Parser(prog="install-offline.sh", description="Installs the study from a wheelhouse on an offline node.")
    p.add_argument("house", metavar="WHEELHOUSE", help="a folder made by envs/wheelhouse.sh")
    p.add_argument("target", metavar="TARGET_DIR", nargs="?", default=str(ROOT / ".offline-site"))
    a = p.parse_args(argv)
    house, target = Path(a.house), Path(os.path.abspath(a.target))
    if not house.is_dir():
        fail(p.prog, f"no wheelhouse folder '{a.house}'")
    if not (house / "MANIFEST.txt").is_file():
        fail(p.prog, f"'{a.house}' has no MANIFEST.txt: make it with envs/wheelhouse.sh")
    if target.exists() and any(target.iterdir()) and not (target / SITE_MARK).is_file():
        fail(
            p.prog, f"TARGET_DIR '{target}' exists, is not empty and is no offline site of this script: choose another"
        )
    files = check_house(house.resolve())
    print(
        f"install-offline.sh: the node has what the wheelhouse leaves to it; installing {len(files)} wheels into {target}",
        file=sys.stderr,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f"{target.name}.new.", dir=target.parent))
    try:
        pip, env = pip_offline()
        cmd = [
            *pip,
            "install",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--no-warn-script-location",
        ]
        run(p.prog, [*cmd, "--target", stage, *files], "pip could not install the wheels (above)", cwd=house, env=env)
        shutil.copy(house / "MANIFEST.txt", stage / SITE_MARK)
        problems = site_problems(stage)
        if problems:
            fail(p.prog, "the offline site would not work on this node:\n  " + "\n  ".join(problems))
        if not (stage / "orthrus" / "__main__.py").is_file():
            fail(p.prog, "the wheelhouse's project wheel has no orthrus/__main__.py")
        old = target.with_name(target.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        stage.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    target.chmod(0o755)
    exports = write_commands(target)
    version = try_commands(target)
    print(f"install-offline.sh: installed; orthrus --help works, snakemake {version}", file=sys.stderr)
    print("install-offline.sh: run these two lines (or source this script instead of running it):", file=sys.stderr)
    print(exports, end="")


if __name__ == "__main__":
    install(sys.argv[1:])
