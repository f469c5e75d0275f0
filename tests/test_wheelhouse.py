"""An offline GPU node's install (issue 52): envs/wheelhouse.sh makes a wheelhouse of everything but
what the node has (torch, numpy, ...), envs/install-offline.sh installs it there with no network.
The fast tests check the scripts' refusals and a small install, offline; the slow one builds the
real wheelhouse for this machine's Python (it needs PyPI), installs it into a fresh environment
that has only the excluded packages, in a network namespace of its own, and runs the study's
commands from it."""

import base64
import csv
import fnmatch
import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "envs" / "wheelhouse.sh"
INSTALL = ROOT / "envs" / "install-offline.sh"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
LIMIT_MB = 60
# wheelhouse.sh's default --exclude: what any GPU node brings with its own torch (the fixture's node; its
# default --node list, this workplace's GPU image, leaves much more to the node)
NODE = ["torch", "nvidia-*", "triton", "numpy", "scipy", "pyarrow", "matplotlib"]
# what the wheelhouse carries whatever the node has (envs/wheelhouse.py's CARRY)
CARRY = {"transformers", "tokenizers", "safetensors", "huggingface-hub", "accelerate"}
DEAD = "http://127.0.0.1:9"  # the discard port: nothing answers


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def has_netns() -> bool:
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


def offline(cmd: list) -> list:
    """`cmd` in a network namespace of its own (no interface but a down loopback) where the
    machine allows it; elsewhere the environment of `offline_env` points every index and proxy at
    a port where nothing answers."""
    return ["unshare", "-rn", *map(str, cmd)] if has_netns() else [*map(str, cmd)]


def offline_env(path: list, **extra) -> dict:
    """A node's environment: its PATH, no virtual environment, no index to reach."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=os.pathsep.join([*map(str, path), "/usr/bin", "/bin"]),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS="",
        PIP_INDEX_URL=f"{DEAD}/simple",
        http_proxy=DEAD,
        https_proxy=DEAD,
        HTTP_PROXY=DEAD,
        HTTPS_PROXY=DEAD,
        **extra,
    )
    return env


def run(cmd, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def write_wheel(folder: Path, name: str, version: str, files: dict, requires=()) -> Path:
    """A wheel as pip writes and reads them: `files` ({path: text}), METADATA, WHEEL and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = dict(files)
    files[f"{dist}.dist-info/METADATA"] = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
    )
    files[f"{dist}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append([path, f"sha256={digest}", str(len(text.encode()))])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([*rows, [f"{dist}.dist-info/RECORD", "", ""]])
    files[f"{dist}.dist-info/RECORD"] = buf.getvalue()
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name_, text in files.items():
            z.writestr(name_, text)
    return path


def write_manifest(folder: Path, wheels: list, node=(), python=PY, extras=""):
    """MANIFEST.txt as wheelhouse.sh writes it: `node` rows are "name spec requirers"."""
    lines = [f"target-python: {python}", f"extras: {extras}", "", "[wheels] name==version file"]
    for w in wheels:
        name, version = w.name.split("-")[:2]
        lines.append(f"{canon(name)}=={version} {w.name}")
    lines += ["", "[node] name spec requirers", *node, ""]
    (folder / "MANIFEST.txt").write_text("\n".join(lines) + "\n")


def sections(manifest: str) -> dict:
    out, current = {}, None
    for line in manifest.splitlines():
        if line.startswith("["):
            current = out.setdefault(line[1 : line.index("]")], [])
        elif current is not None and line.strip():
            current.append(line.split("  #")[0].split())
    return out


# ---------------------------------------------------------------- fast: refusals, a small install


@pytest.mark.parametrize(
    "args, says",
    [
        (["out", "--bogus"], "unrecognized arguments: --bogus"),
        (["--fast", "out"], "unrecognized arguments: --fast"),
        ([], "the following arguments are required: OUT_DIR"),
        (["out", "other"], "unrecognized arguments: other"),
        (["out", "--python"], "argument --python: expected one argument"),
        (["out", "--python", "three"], "--python 'three' is not a Python version"),
        (["out", "--platform", "many linux"], "--platform 'many linux' is not a platform tag"),
        (["out", "--platform", "macosx_11_0_arm64"], "--platform 'macosx_11_0_arm64' is not a platform tag"),
        (["out", "--exclude", "torch;rm"], "--exclude 'torch;rm'"),
        (["out", "--max-mb", "lots"], "--max-mb 'lots' is not a number"),
        (["out", "--extras", "nope"], "unknown extra nope"),
        (["out", "--node", "no-such-list.txt"], "--node 'no-such-list.txt': no such file"),
    ],
)
def test_wheelhouse_refuses_bad_arguments(tmp_path, args, says):
    r = run(["bash", WHEELHOUSE, *args], cwd=tmp_path, env=offline_env([Path(sys.executable).parent]))
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (["empty", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: WHEELHOUSE"),
        (["nowhere"], "no wheelhouse folder 'nowhere'"),
        (["empty"], "has no MANIFEST.txt"),
        (["empty", "site", "more"], "unrecognized arguments: more"),
    ],
)
def test_install_offline_refuses_bad_arguments(tmp_path, args, says):
    (tmp_path / "empty").mkdir()
    r = run(["bash", INSTALL, *args], cwd=tmp_path, env=offline_env([Path(sys.executable).parent]))
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert not (tmp_path / "site").exists()


def test_the_node_rows_read_markers_for_the_target_not_this_python(tmp_path):
    """MANIFEST.txt's [node] rows come from the kept wheels' metadata with the markers evaluated for the
    target (CPython 3.12 on Linux/aarch64 here, whatever runs the test) and the extras the resolution
    asked of each wheel; specifiers of one package intersect, and its requirers are listed."""
    sys.path.insert(0, str(ROOT / "envs"))
    try:
        import wheelhouse
    finally:
        sys.path.remove(str(ROOT / "envs"))
    requires = [
        'numpy>=1.24; python_version >= "3.12"',
        'scipy; python_version < "3.12"',
        'torch>=2.4; extra == "hf"',
        'triton; extra == "unused"',
        'pyarrow; platform_machine == "aarch64"',
        'matplotlib; sys_platform == "win32"',
        "requests",
    ]
    a = write_wheel(tmp_path, "a-pkg", "1.0", {}, requires)
    b = write_wheel(tmp_path, "b-pkg", "1.0", {}, ["numpy<3"])
    pins = {"a-pkg": ("1.0", {"hf"}), "b-pkg": ("1.0", set())}
    env = wheelhouse.target_env("3.12", "aarch64")
    needs = wheelhouse.node_needs([a, b], pins, NODE, env)
    assert {n: (str(spec), sorted(by)) for n, (spec, by) in needs.items()} == {
        "numpy": (str(SpecifierSet("<3,>=1.24")), ["a-pkg", "b-pkg"]),
        "pyarrow": ("", ["a-pkg"]),
        "torch": (">=2.4", ["a-pkg"]),
    }
    assert wheelhouse.platform_tags("manylinux_2_28_x86_64")[0] == "x86_64-manylinux_2_28"
    tags = wheelhouse.platform_tags("manylinux_2_28_x86_64")[1]
    assert tags[0] == "manylinux_2_28_x86_64" and {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)


def install(house: Path, site: Path, python=sys.executable, timeout=300) -> subprocess.CompletedProcess:
    """install-offline.sh with no network, on `python` (the node's)."""
    env = offline_env([Path(python).parent], PYTHON=str(python))
    return run(offline(["bash", INSTALL, house, site]), cwd=house.parent, env=env, timeout=timeout)


def test_install_offline_names_each_missing_node_package(tmp_path):
    """The node lacks two packages the wheelhouse leaves to it (one absent, one too old): both
    are named, with who needs them, and nothing is installed."""
    house = tmp_path / "house"
    house.mkdir()
    import numpy

    node = ["no-such-package-xyz * orthrus-exactness", "numpy >=999 pandas,scikit-learn", "pytest * orthrus-exactness"]
    write_manifest(house, [write_wheel(house, "tinypkg", "1.0", {"tinypkg/__init__.py": ""})], node)
    r = install(house, tmp_path / "site")
    assert r.returncode != 0
    assert "no-such-package-xyz (needed by orthrus-exactness): ModuleNotFoundError" in r.stderr, r.stderr
    assert f"numpy>=999 (needed by pandas,scikit-learn): the node has {numpy.__version__}" in r.stderr, r.stderr
    assert "  pytest" not in r.stderr
    assert not (tmp_path / "site").exists()


def test_install_offline_refuses_another_python_and_a_missing_wheel(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    ghost = house / "ghost-1.0-py3-none-any.whl"
    write_manifest(house, [write_wheel(house, "tinypkg", "1.0", {"tinypkg/__init__.py": ""}), ghost], python="3.99")
    r = install(house, tmp_path / "site")
    assert r.returncode != 0
    assert f"the wheelhouse is for Python 3.99, {sys.executable} is Python {PY}" in r.stderr, r.stderr
    assert "MANIFEST.txt lists wheels the wheelhouse lacks: ghost-1.0-py3-none-any.whl" in r.stderr, r.stderr
    assert not (tmp_path / "site").exists()


def test_install_offline_names_a_requirement_nothing_meets(tmp_path):
    """A wheel needs a package that neither the wheelhouse nor the node has (a resolution that lost
    one): the install stops before TARGET_DIR is touched, naming it."""
    house, site = tmp_path / "house", tmp_path / "site"
    house.mkdir()
    site.mkdir()
    (site / ".orthrus-offline-site").write_text("an earlier install\n")
    wheel = write_wheel(house, "tinypkg", "1.0", {"tinypkg/__init__.py": ""}, requires=["no-such-dep-xyz>=1"])
    write_manifest(house, [wheel])
    r = install(house, site)
    assert r.returncode != 0
    assert "tinypkg 1.0 requires no-such-dep-xyz, which is not installed" in r.stderr, r.stderr
    assert [p.name for p in site.iterdir()] == [".orthrus-offline-site"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("site.")] == []


def test_install_offline_names_a_node_package_the_site_would_break(tmp_path):
    """The wheelhouse carries a PyYAML older than the node's transformers accepts (>=5.1): the site would
    hide the node's PyYAML from it, so the install stops naming who needs what, and TARGET_DIR stays as it was."""
    house = tmp_path / "house"
    house.mkdir()
    write_manifest(house, [write_wheel(house, "PyYAML", "0.1", {"yaml_stand_in/__init__.py": ""})])
    r = install(house, tmp_path / "site")
    assert r.returncode != 0
    assert re.search(r"the node's transformers \S+ has requirement pyyaml\S*, but you have pyyaml 0.1", r.stderr), (
        r.stderr
    )
    assert not (tmp_path / "site").exists()


def project_wheel(folder: Path) -> Path:
    """The project's wheel, built without network from the files git knows (as wheelhouse.sh does)."""
    src = folder / "src"
    files = run(
        ["git", "-C", ROOT, "ls-files", "-c", "-o", "--exclude-standard", "pyproject.toml", "README.md", "orthrus"]
    ).stdout.split("\n")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((ROOT / f).read_bytes())
    r = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", folder, src])
    assert r.returncode == 0, r.stderr
    return next(folder.glob("orthrus_exactness-*.whl"))


def test_install_offline_sourced_puts_orthrus_on_the_path(tmp_path):
    """The project's wheel alone, on this Python (it has torch, transformers, snakemake ... as a node
    would): sourced, the script exports PYTHONPATH and PATH; `orthrus` is the site's shim and
    `import orthrus` the site's copy, not the repository's; a second install replaces the first."""
    house, site = tmp_path / "house", tmp_path / "site"
    house.mkdir()
    write_manifest(house, [project_wheel(house)], ["torch >=2.4 orthrus-exactness", "numpy * orthrus-exactness"])
    env = offline_env([Path(sys.executable).parent], PYTHON=sys.executable)
    script = f"""
        set -e
        source {INSTALL} {house} {site}
        command -v orthrus
        orthrus --help | head -1
        cd {tmp_path} && python3 -c 'import orthrus; print(orthrus.__file__)'
    """
    for _ in range(2):
        r = run(offline(["bash", "-c", script]), cwd=tmp_path, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == f"{site}/bin/orthrus"
        assert lines[1].startswith("usage: orthrus")
        assert lines[2] == f"{site}/orthrus/__init__.py"
        assert "PYTHONPATH and PATH exported" in r.stderr
    shim = (site / "bin" / "orthrus").read_text()
    assert f"exec {sys.executable} -m orthrus" in shim and f"PYTHONPATH={site}" in shim
    assert sorted(p.name for p in tmp_path.iterdir()) == ["house", "site"]


# ---------------------------------------------------------------- slow: the real wheelhouse


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """The wheelhouse for this machine's Python and platform, the default exclude list left out and no
    node list (`--node none`): everything else is carried (over the size limit, which it reports)."""
    out = tmp_path_factory.mktemp("wheelhouse") / "wh"
    env = {**os.environ, "PYTHON": sys.executable}
    r = run(
        ["bash", WHEELHOUSE, out, "--python", PY, "--platform", "manylinux_2_28_x86_64", "--node", "none"],
        env=env,
        timeout=1800,
    )
    assert (out / "MANIFEST.txt").exists(), r.stdout + r.stderr
    return out, r


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A fresh environment with only the excluded packages (at the study's pins), as a node has
    them: installed while the registry is reachable, before anything goes offline."""
    venv = tmp_path_factory.mktemp("node") / "venv"
    assert run([sys.executable, "-m", "venv", venv]).returncode == 0
    python = venv / "bin" / "python"
    names = [n for n in NODE if "*" not in n and n != "triton"]
    r = run([python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", *names], timeout=1800)
    assert r.returncode == 0, r.stderr
    return python


def tracked_bytes() -> int:
    files = run(["git", "-C", ROOT, "ls-files", "-z"]).stdout.split("\0")
    return sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file())


@pytest.mark.slow
def test_wheelhouse_holds_one_wheel_of_each_but_the_nodes(wheelhouse):
    out, r = wheelhouse
    manifest = (out / "MANIFEST.txt").read_text()
    parts = sections(manifest)
    wheels = sorted(p.name for p in out.glob("*.whl"))
    assert sorted(row[1] for row in parts["wheels"]) == wheels
    names = [canon(w.split("-")[0]) for w in wheels]
    assert len(set(names)) == len(names), "two versions of one package"
    assert [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in NODE)] == []
    # what only torch pulls in stays out with it; what the study runs is in
    assert not {"sympy", "mpmath", "networkx", "cuda-toolkit", "pillow", "contourpy"} & set(names)
    assert {"orthrus-exactness", "snakemake", "transformers", "lm-eval", "datasets", "gguf", "pulp"} <= set(names)
    assert {row[0] for row in parts["node"]} == {"torch", "numpy", "scipy", "pyarrow", "matplotlib"}
    assert f"target-python: {PY}" in manifest
    reqs = [line for line in (out / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert sorted(reqs) == sorted(row[0] for row in parts["wheels"])
    # pulp without its cbc binaries, its RECORD rewritten to match
    with zipfile.ZipFile(next(out.glob("pulp-*.whl"))) as z:
        listed = {
            row[0]
            for row in csv.reader(io.StringIO(z.read(next(n for n in z.namelist() if n.endswith("RECORD"))).decode()))
        }
        assert listed == set(z.namelist())
        assert not [n for n in z.namelist() if "/solverdir/" in n and not n.endswith((".py", ".txt"))]


@pytest.mark.slow
def test_the_default_wheelhouse_for_the_gpu_node_fits_the_limit(tmp_path):
    """For the GPU node's CPython 3.12 with its image's package list (the defaults): under 60 MB with
    the project's files, the model's libraries carried though the node has them, the rest of its list
    left to it and named in MANIFEST.txt for install-offline.sh to check."""
    out = tmp_path / "wh312"
    r = run(["bash", WHEELHOUSE, out], env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    said = re.search(r": ([\d.]+) MB \(limit 60 MB\)", r.stdout)
    assert said and float(said.group(1)) < LIMIT_MB, r.stdout
    parts = sections((out / "MANIFEST.txt").read_text())
    names = {canon(w.name.split("-")[0]) for w in out.glob("*.whl")}
    assert CARRY <= names and {"orthrus-exactness", "snakemake", "lm-eval"} <= names
    assert not {"pandas", "statsmodels", "scikit-learn", "torch", "numpy"} & names
    assert {"pandas", "statsmodels", "torch"} <= {row[0] for row in parts["node"]}
    for w in out.glob("*.whl"):  # CPython 3.12's wheels for the node's Linux, whatever this machine runs
        _, abi, plat = w.name[: -len(".whl")].split("-")[-3:]
        assert abi in ("none", "abi3", "cp312") and (plat == "any" or "linux" in plat and "x86_64" in plat), w.name


@pytest.mark.slow
def test_wheelhouse_size_limit(wheelhouse):
    """The project's git-tracked files plus the wheelhouse against the 60 MB limit: the script
    passes under it and fails over it, naming the size (with no node list the wheels alone are about
    105 MB: the node must bring more for the limit to hold, see the script's header)."""
    out, r = wheelhouse
    files = [*out.glob("*.whl"), out / "MANIFEST.txt", out / "requirements.txt"]
    wheels = sum(p.stat().st_size for p in out.glob("*.whl"))
    total = sum(p.stat().st_size for p in files) + tracked_bytes()
    said = re.search(r"wheels, ([\d.]+) MB in .*: ([\d.]+) MB \(limit 60 MB\)", r.stdout)
    assert said, r.stdout + r.stderr
    assert abs(float(said.group(1)) - wheels / 1e6) < 0.06
    assert abs(float(said.group(2)) - total / 1e6) < 0.5  # the tree may change while the test runs
    if total > LIMIT_MB * 1e6 + 0.5e6:
        assert r.returncode != 0 and f"come to {said.group(2)} MB, over the 60 MB limit" in r.stderr, r.stderr
    elif total < LIMIT_MB * 1e6 - 0.5e6:
        assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_offline_install_runs_the_study_commands(wheelhouse, node, tmp_path):
    """install-offline.sh with no network into a fresh environment that has only the excluded
    packages; then orthrus, snakemake (a two-job workflow that calls `orthrus`) and the study's
    imports run from it, torch and numpy from the node, everything else from the site."""
    out, _ = wheelhouse
    site = tmp_path / "site"
    r = install(out, site, python=node, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    exports = r.stdout
    assert re.fullmatch(r"export PYTHONPATH=\S+\nexport PATH=\S+\n", exports), exports
    assert not [p for p in ("torch", "numpy", "scipy", "pyarrow", "matplotlib") if (site / p).exists()]
    (tmp_path / "flow").mkdir()
    (tmp_path / "flow" / "Snakefile").write_text(
        'rule all:\n    input: "a.txt", "b.txt"\n\nrule one:\n    output: "{n}.txt"\n    shell: "orthrus --help > {output}"\n'
    )

    def on_node(command: str) -> subprocess.CompletedProcess:
        env = offline_env([node.parent], EXPORTS=exports)
        return run(offline(["bash", "-c", f'eval "$EXPORTS"; {command}']), cwd=tmp_path / "flow", env=env, timeout=600)

    r = on_node("orthrus --help")
    assert r.returncode == 0 and r.stdout.startswith("usage: orthrus"), r.stderr
    r = on_node("python -m snakemake --version")
    assert r.returncode == 0 and r.stdout.strip() == "9.27.1", r.stderr
    code = "import orthrus.decode.loop, orthrus, torch, numpy, transformers; print(orthrus.__file__, torch.__file__, numpy.__file__, transformers.__file__)"
    r = on_node(f"python -c '{code}'")
    assert r.returncode == 0, r.stderr
    mine, torch_, numpy_, transformers_ = r.stdout.split()
    assert mine.startswith(f"{site}/") and transformers_.startswith(f"{site}/")
    assert torch_.startswith(f"{node.parent.parent}/") and numpy_.startswith(f"{node.parent.parent}/")
    r = on_node("python -m pip check")
    assert r.returncode == 0, r.stdout + r.stderr
    r = on_node("snakemake --cores 2 --quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "flow" / "b.txt").read_text().startswith("usage: orthrus")


@pytest.mark.slow
def test_offline_install_names_a_wheel_the_wheelhouse_lost(wheelhouse, node, tmp_path):
    """The same wheelhouse less PyYAML (as a resolution that lost it would make it): the install
    fails naming it, rather than leaving a site that breaks at the first job."""
    out, _ = wheelhouse
    house = tmp_path / "house"
    house.mkdir()
    for p in out.iterdir():
        if not p.name.startswith("pyyaml-"):
            (house / p.name).symlink_to(p)
    (house / "MANIFEST.txt").unlink()
    manifest = (out / "MANIFEST.txt").read_text()
    (house / "MANIFEST.txt").write_text(
        "".join(line for line in manifest.splitlines(True) if not line.startswith("pyyaml=="))
    )
    r = install(house, tmp_path / "site", python=node, timeout=900)
    assert r.returncode != 0
    assert re.search(r"\S+ \S+ requires pyyaml, which is not installed", r.stderr), r.stderr
    assert not (tmp_path / "site").exists()
