"""A wheelhouse for an offline GPU node (issue 52): every wheel the study needs for the node's Python and
platform except what the node already has, to carry there and install with envs/install-offline.sh
(envs/offline_install.py). Run through envs/wheelhouse.sh, on a machine that reaches the registry.

It resolves with uv (pinned below, fetched into a scratch folder): `uv pip compile --python-version
--python-platform` evaluates every marker for the node's Python and platform, and `--excludes` leaves
the node's packages out together with everything only they need (torch's nvidia-* wheels, triton,
sympy, ...). pip then downloads the resolved wheels for the target (`pip download --no-deps --platform
--python-version`); the few dependencies published only as source are built here and must come out
pure Python. What the kept wheels ask of the excluded packages is read from their metadata, markers
evaluated for the target, into MANIFEST.txt's [node], which the install checks on the node.
"""

import argparse
import csv
import email.parser
import fnmatch
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from offline_install import ROOT, Parser, Requirement, SpecifierSet, canon, default_environment, fail, run

UV = "uv==0.13.9"  # pinned: the resolver's choices are the wheelhouse's contents
DEFAULT_EXCLUDE = "torch,nvidia-*,triton,numpy,scipy,pyarrow,matplotlib"
# always carried, whatever the node has: they load and run the model, and every decoding row records
# their versions (constraints.txt's)
CARRY = {"transformers", "tokenizers", "safetensors", "huggingface-hub", "accelerate"}
PROG = "wheelhouse.sh"
PIP = [sys.executable, "-m", "pip"]


def sh(cmd: list, what: str) -> str:
    return run(PROG, cmd, what)


def platform_tags(tag: str) -> tuple[str, list[str]]:
    """uv's name of a manylinux_2_N_ARCH tag, and the tags pip must be given for it: pip matches a
    wheel's manylinux tag literally, so 2_N brings every older glibc's tag and their legacy names."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(x86_64|aarch64)", tag)
    if not m:
        raise ValueError(f"--platform '{tag}' is not a platform tag like manylinux_2_28_x86_64")
    minor, arch = int(m.group(1)), m.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for n in range(minor, 4, -1):
        tags += [f"manylinux_2_{n}_{arch}"] + ([f"{legacy[n]}_{arch}"] if n in legacy else [])
    return f"{arch}-manylinux_2_{minor}", tags


def target_env(python: str, arch: str) -> dict:
    """The marker environment of CPython `python` (X.Y) on Linux/`arch`."""
    env = default_environment()
    env.update(implementation_name="cpython", implementation_version=f"{python}.0", os_name="posix")
    env.update(platform_machine=arch, platform_python_implementation="CPython", platform_system="Linux")
    env.update(python_full_version=f"{python}.0", python_version=python, sys_platform="linux")
    return env


def node_names(path: str) -> set[str]:
    """The package names of a node list (NAME or NAME==VERSION a line, # comments), less CARRY."""
    if not os.path.isfile(path):
        raise ValueError(f"--node '{path}': no such file (a list of the node's packages, or none)")
    names = {canon(re.split(r"[=<>~!;\[\s]", line.split("#", 1)[0].strip(), maxsplit=1)[0]) for line in open(path)}
    bad = sorted(n for n in names if n and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", n))
    if bad:
        raise ValueError(f"--node '{path}' names something that is not a package name: {bad[0]}")
    return {n for n in names if n} - CARRY


def make_args(argv: list) -> argparse.Namespace:
    p = Parser(prog=PROG, description="A wheelhouse for an offline GPU node (envs/wheelhouse.sh).")
    p.add_argument("out", metavar="OUT_DIR", help="the wheelhouse's folder")
    p.add_argument("--python", default="3.12", help="the node's Python, X.Y (default 3.12)")
    p.add_argument("--platform", default="manylinux_2_28_x86_64", help="the node's newest manylinux_2_N tag")
    p.add_argument(
        "--exclude", default=DEFAULT_EXCLUDE, help=f"patterns of what the node has ({DEFAULT_EXCLUDE}; +X adds)"
    )
    p.add_argument(
        "--node", default=str(ROOT / "envs" / "gpu-node-packages.txt"), help="the node's package list, or none"
    )
    p.add_argument("--extras", default="real", help="the project's extras to carry (default real)")
    p.add_argument("--max-mb", default="60", help="the limit on the project's git-tracked files plus the wheels")
    a = p.parse_args(argv)
    try:
        if not re.fullmatch(r"3\.\d+(\.\d+)?", a.python):
            raise ValueError(f"--python '{a.python}' is not a Python version like 3.12")
        a.python = ".".join(a.python.split(".")[:2])
        a.uv_platform, a.pip_platforms = platform_tags(a.platform)
        exclude = DEFAULT_EXCLUDE + "," + a.exclude[1:] if a.exclude.startswith("+") else a.exclude
        if not re.fullmatch(r"[A-Za-z0-9_.*?,-]*", exclude):
            raise ValueError(f"--exclude '{a.exclude}' is not a comma-separated list of package names")
        a.exclude = sorted(
            {canon(x) for x in exclude.split(",") if x} | (node_names(a.node) if a.node != "none" else set())
        )
        if not re.fullmatch(r"\d+(\.\d+)?", a.max_mb):
            raise ValueError(f"--max-mb '{a.max_mb}' is not a number of MB")
        a.max_mb = float(a.max_mb)
        a.extras = [e for e in a.extras.split(",") if e]
        known = project_extras() if a.extras else []
        if set(a.extras) - set(known):
            raise ValueError(
                f"unknown extra {', '.join(sorted(set(a.extras) - set(known)))} (the project has {', '.join(known)})"
            )
    except ValueError as e:
        fail(p.prog, str(e))
    if os.path.isdir(a.out) and os.listdir(a.out) and not os.path.isfile(os.path.join(a.out, "MANIFEST.txt")):
        fail(p.prog, f"OUT_DIR '{a.out}' exists, is not empty and holds no wheelhouse (MANIFEST.txt): choose another")
    return a


def project_extras() -> list[str]:
    """The extras pyproject.toml declares (read, not built: the arguments are checked before any download)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {}))


def git_files(root: Path, *paths: str, untracked=False) -> list[Path]:
    """The files git knows (tracked, and with `untracked` new ones it does not ignore): not a virtual
    environment, results or an OUT_DIR that lie in the checkout. Without git: every file outside dot-folders."""
    new = ["-o", "--exclude-standard"] if untracked else []
    cmd = ["git", "-C", root, "ls-files", "-z", "-c", *new, "--", *paths]
    try:
        names = subprocess.run([str(c) for c in cmd], capture_output=True, check=True).stdout.decode().split("\0")
        found = [root / n for n in names if n]
    except (OSError, subprocess.CalledProcessError):
        found = [p for q in paths or ["."] for p in (root / q).rglob("*")]
        found = [p for p in found if not any(part[0] == "." for part in p.relative_to(root).parts)]
    return [p for p in found if p.is_file() and "__pycache__" not in p.parts]


def build_project(work: Path, uv: Path) -> Path:
    src = work / "src"
    names = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "README.md", "LICENSE*", "orthrus")
    for f in git_files(ROOT, *names, untracked=True):
        (src / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, src / f.relative_to(ROOT))
    sh(
        [uv, "build", "-q", "--no-config", "--wheel", "--out-dir", work / "built", src],
        "the project's wheel did not build",
    )
    return next((work / "built").glob("*.whl"))


def resolve(a, work: Path, uv: Path, project: Path) -> dict:
    """{name: (version, extras)} of everything the target needs but the excluded packages, resolved by uv
    for the target's Python and platform, constraints.txt pinning the versions."""
    (work / "excludes.txt").write_text("".join(f"{n}\n" for n in a.exclude if not set("*?") & set(n)))
    root = f"orthrus-exactness{'[' + ','.join(a.extras) + ']' if a.extras else ''} @ {project.as_uri()}"
    (work / "in.txt").write_text(root + "\n")
    cmd = [uv, "pip", "compile", "-q", "--no-config", "--python", sys.executable, "--python-version", a.python]
    cmd += ["--python-platform", a.uv_platform, "-c", ROOT / "constraints.txt", "--excludes", work / "excludes.txt"]
    cmd += ["--no-strip-extras", "--no-annotate", "--no-header", work / "in.txt", "-o", work / "resolved.txt"]
    sh(cmd, f"the project's dependencies do not resolve for CPython {a.python} on {a.platform} (above)")
    pins = {}
    for line in (work / "resolved.txt").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            req = Requirement(line.split(" #")[0])
            version = next(iter(req.specifier)).version if req.specifier else project.name.split("-")[1]
            pins[canon(req.name)] = (version, set(req.extras))
    # a wildcard of --exclude names no package before the resolution: what it matches now is the node's
    return {n: v for n, v in pins.items() if not any(fnmatch.fnmatchcase(n, x) for x in a.exclude)}


def fetch(a, work: Path, pins: dict, project: Path) -> list[Path]:
    """The kept wheels in OUT_DIR: downloaded for the target, or built here from source (pure Python only)."""
    dl = work / "dl"
    (work / "download.txt").write_text("".join(f"{n}=={v}\n" for n, (v, _) in pins.items() if n != "orthrus-exactness"))
    plats = [x for t in a.pip_platforms for x in ("--platform", t)]
    cmd = [*PIP, "download", "-q", "--no-deps", "--python-version", a.python, "--implementation", "cp", *plats]
    target = f"CPython {a.python} on {a.platform}"
    sh([*cmd, "-d", dl, "-r", work / "download.txt"], f"a wheel named above could not be downloaded for {target}")
    sources = sorted(p for p in dl.iterdir() if p.suffix != ".whl")
    if sources:
        print(f"wheelhouse: building wheels of {', '.join(p.name for p in sources)} (published as source only)")
        built = work / "built-here"
        sh(
            [*PIP, "wheel", "-q", "--no-deps", "-w", built, *sources],
            f"could not build {', '.join(p.name for p in sources)}",
        )
        native = [p.name for p in built.glob("*.whl") if not p.name.endswith("-none-any.whl")]
        if native:
            fail(
                PROG, f"no wheel for {target} of {native[0]}: its source builds a platform wheel only for this machine"
            )
        for p in [*built.glob("*.whl"), *sources]:
            shutil.move(p, dl) if p.suffix == ".whl" else p.unlink()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in [*out.glob("*.whl"), out / "MANIFEST.txt", out / "requirements.txt"]:
        p.unlink(missing_ok=True)
    for p in [*dl.glob("*.whl"), project]:
        shutil.copy(p, out)
    return sorted(out.glob("*.whl"))


def strip_pulp(path: Path) -> None:
    """Drops pulp's bundled cbc solver binaries (35 MB; snakemake schedules without them) and their RECORD rows."""
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        drop = {
            i.filename
            for i in infos
            if "/solverdir/" in i.filename and not i.is_dir() and not i.filename.endswith((".py", ".txt"))
        }
        if not drop:
            return
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info in (i for i in infos if i.filename not in drop):
                data = z.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    rows = [r for r in csv.reader(io.StringIO(data.decode())) if r and r[0] not in drop]
                    buf = io.StringIO()
                    csv.writer(buf, lineterminator="\n").writerows(rows)
                    data = buf.getvalue().encode()
                out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    os.replace(tmp, path)
    print(f"pulp: {len(drop)} solver binaries removed ({path.stat().st_size / 1e6:.1f} MB left)")


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return email.parser.Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []


def node_needs(wheels: list[Path], pins: dict, exclude: list, env: dict) -> dict:
    """{excluded name: (specifier, requirers)}: what the kept wheels, with the extras the resolution
    asked of them and the target's markers, ask of the node's packages."""
    needs = {}
    for wheel in wheels:
        name = canon(wheel.name.split("-")[0])
        for req in map(Requirement, requires_dist(wheel)):
            dep = canon(req.name)
            if not any(fnmatch.fnmatchcase(dep, x) for x in exclude):
                continue
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in pins[name][1] | {""}):
                continue
            spec, by = needs.setdefault(dep, (SpecifierSet(), set()))
            needs[dep] = (spec & req.specifier, by | {name})
    return dict(sorted(needs.items()))


def write_manifest(a, wheels: list[Path], pins: dict, needs: dict) -> None:
    names = [(canon(w.name.split("-")[0]), w.name.split("-")[1]) for w in wheels]
    have = {n for n, _ in names}
    if len(have) != len(names) or have != set(pins):
        lost, extra = sorted(set(pins) - have), sorted(have - set(pins))
        fail(PROG, f"the wheels do not match the resolution: missing {lost}, unexpected {extra} (or two of one)")
    out = Path(a.out)
    (out / "requirements.txt").write_text(
        "# pip install --no-index --find-links . -r requirements.txt (envs/install-offline.sh does it)\n"
        + "".join(f"{n}=={v}\n" for n, v in names)
    )
    size = sum(w.stat().st_size for w in wheels)
    lines = [
        "# orthrus-exactness wheelhouse for an offline node: made by envs/wheelhouse.sh, installed by envs/install-offline.sh",
        f"target-python: {a.python}",
        "target-implementation: cp",
        f"target-platform: {a.platform}",
        f"platform-tags: {' '.join(a.pip_platforms)}",
        f"extras: {','.join(a.extras)}",
        f"exclude: {','.join(a.exclude)}",
        f"made: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} with Python {sys.version.split()[0]} and {UV}",
        f"wheels: {len(wheels)} ({size / 1e6:.1f} MB)",
        "",
        "[wheels] name==version file",
        *(
            f"{n}=={v} {w.name}" + ("  # cbc solver binaries removed" if n == "pulp" else "")
            for w, (n, v) in zip(wheels, names)
        ),
        "",
        "[node] excluded packages the wheels need: name, what they ask of it, who asks (install-offline.sh checks each)",
        *(f"{n} {spec or '*'} {','.join(sorted(by))}" for n, (spec, by) in needs.items()),
    ]
    (out / "MANIFEST.txt").write_text("\n".join(lines) + "\n")


def check_size(a, wheels: list[Path], needs: dict) -> None:
    out = Path(a.out)
    size = sum(w.stat().st_size for w in wheels)
    tree = sum(p.stat().st_size for p in git_files(ROOT))
    total = size + tree + sum((out / f).stat().st_size for f in ("MANIFEST.txt", "requirements.txt"))
    print(
        f"wheelhouse: {len(wheels)} wheels, {size / 1e6:.1f} MB in {out}; with the project's git-tracked files "
        f"({tree / 1e6:.1f} MB): {total / 1e6:.1f} MB (limit {a.max_mb:g} MB)"
    )
    print("the node provides:", ", ".join(f"{n}{spec}" for n, (spec, _) in needs.items()) or "nothing")
    if total > a.max_mb * 1e6:
        largest = sorted(wheels, key=lambda w: -w.stat().st_size)[:5]
        fail(
            PROG,
            f"the project tree and the wheelhouse come to {total / 1e6:.1f} MB, over the {a.max_mb:g} MB limit: "
            "the largest wheels are " + ", ".join(f"{w.name} ({w.stat().st_size / 1e6:.1f} MB)" for w in largest),
        )


def make(argv: list) -> None:
    a = make_args(argv)
    extras, n = ",".join(a.extras), len(a.exclude)
    print(f"wheelhouse: CPython {a.python} on {a.platform}, extras '{extras}', leaving {n} packages to the node")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sh([*PIP, "install", "-q", "--target", work / "uv", UV], f"could not install {UV}")
        uv = work / "uv" / "bin" / "uv"
        project = build_project(work, uv)
        print(f"wheelhouse: built {project.name}")
        pins = resolve(a, work, uv, project)
        wheels = fetch(a, work, pins, project)
    for w in wheels:
        if canon(w.name.split("-")[0]) == "pulp":
            strip_pulp(w)
    needs = node_needs(wheels, pins, a.exclude, target_env(a.python, a.uv_platform.split("-")[0]))
    write_manifest(a, wheels, pins, needs)
    check_size(a, wheels, needs)


if __name__ == "__main__":
    make(sys.argv[1:])
