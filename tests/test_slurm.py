"""profiles/slurm on a real one-node SLURM cluster started on this machine.

The test starts munged, slurmctld and slurmd (Debian's `slurmctld slurmd slurm-client munge`,
installed by .ci/run when it can) with a configuration in a temporary directory, runs the
smoke study's teacher, prompts and one corpus shard with `--profile profiles/slurm`, and checks
that every job went through sbatch (job ids in Snakemake's output, the controller's log and the
plugin's per-job logs) and that the outputs appeared. It skips, naming the reason, where the
cluster cannot be started (not root, binaries missing, a daemon that does not come up); it never
runs the jobs any other way. See ../shared/SLURM-NOTES.md for what was seen on this machine.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The smoke study's first stages (tests/smoke/config.yaml), small enough for a 4000 MB node.
CONFIG = {
    "seed": 0,
    "threads": 1,
    "teacher": {
        "name": "teacher",
        "source": "tiny",
        "tiny": {
            "steps": 40,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_layers": 2,
            "head_dim": 16,
            "eval_per_domain": 0,
            "batch_size": 8,
        },
    },
    "prompts": {"source": "tiny", "eval_per_domain": 1, "distill_n": 32},
    "corpus": {"shards": 2, "batch_size": 16, "max_new_tokens": 24, "precision": "fp32"},
    "models": {},
    "external_models": {},
    "decode": {"precisions": ["fp32"], "attentions": ["eager"], "max_new_tokens": 16, "shards": 1},
    "analysis": {"ppl_precision": "fp32", "near_tie": 0.125},
    "benchmarks": {"enabled": False},
    "resources": {s: {"mem_mb": 1000, "runtime": 10} for s in ("teacher", "prompts", "corpus")},
}
PROFILE = ROOT / "profiles" / "slurm"
BINARIES = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel"]
SBIN = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
# The jobstep plugin drops SLURM_CONF before the nested `srun` inside each job, so the
# configuration has to be at the compiled-in default path while the test runs.
ETC_CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by orthrus tests/test_slurm.py, pid "


def _which(name):
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _foreign_etc_conf():
    """An /etc/slurm/slurm.conf of a real cluster, or of a test run still alive, is left alone."""
    if not ETC_CONF.exists():
        return None
    first = ETC_CONF.read_text(errors="replace").split("\n", 1)[0]
    if first.startswith(MARK) and not _pid_alive(int(first[len(MARK) :] or 0)):
        return None
    return f"{ETC_CONF} exists and is not a leftover of this test (a real cluster, or another test run)"


def _skip_reason():
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "starting a SLURM cluster needs root (SlurmUser=root, munged)"
    missing = [b for b in BINARIES if not _which(b)]
    if missing:
        return (
            f"SLURM/munge binaries missing: {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)"
        )
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError as e:
        return f"snakemake-executor-plugin-slurm not installed: {e}"
    return _foreign_etc_conf()


class LocalSlurm:
    """munged + slurmctld + slurmd in the foreground, configuration and state under `base`."""

    def __init__(self, base: Path, partitions, mem_mb=4000):
        self.base = base
        self.host = socket.gethostname().split(".")[0]
        self.procs = []
        self.conf = ETC_CONF
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for d in ("state", "spool", "munge"):
            (base / d).mkdir(mode=0o700, parents=True, exist_ok=True)
        self.sock = base / "munge" / "munge.socket"
        key = base / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge = [
            _which("munged"),
            "-F",
            "-f",
            f"--socket={self.sock}",
            f"--key-file={key}",
            f"--pid-file={base / 'munge' / 'munged.pid'}",
            f"--log-file={base / 'munge' / 'munged.log'}",
            f"--seed-file={base / 'munge' / 'munged.seed'}",
        ]
        cpus = os.cpu_count() or 1
        lines = [
            "ClusterName=orthrustest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.sock}",
            "CredType=cred/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "ReturnToService=2",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MinJobAge=300",
            f"StateSaveLocation={base / 'state'}",
            f"SlurmdSpoolDir={base / 'spool'}",
            f"SlurmctldPidFile={base / 'slurmctld.pid'}",
            f"SlurmdPidFile={base / 'slurmd.pid'}",
            f"SlurmctldLogFile={base / 'slurmctld.log'}",
            f"SlurmdLogFile={base / 'slurmd.log'}",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN",
        ]
        for i, name in enumerate(partitions):
            lines.append(
                f"PartitionName={name} Nodes={self.host} Default={'YES' if i == 0 else 'NO'} MaxTime=INFINITE State=UP"
            )
        ETC_CONF.parent.mkdir(parents=True, exist_ok=True)
        self.wrote_conf = True
        self.conf.write_text(MARK + f"{os.getpid()}\n" + "\n".join(lines) + "\n")

    def _start(self, argv, name):
        log = open(self.base / f"{name}.stdout", "w")
        self.procs.append(
            (name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True))
        )

    def start(self, timeout=30):
        self._start(self.munge, "munged")
        deadline = time.time() + 10
        while not self.sock.exists():
            if time.time() > deadline or self.procs[-1][1].poll() is not None:
                return f"munged did not start: {self.tail('munged.stdout')} {self.tail('munge/munged.log')}"
            time.sleep(0.1)
        self._start([_which("slurmctld"), "-D", "-i"], "slurmctld")
        self._start([_which("slurmd"), "-D", "-N", self.host], "slurmd")
        deadline = time.time() + timeout
        state = ""
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    return (
                        f"{name} exited with {p.returncode}: {self.tail(name + '.stdout')} {self.tail(name + '.log')}"
                    )
            res = subprocess.run([_which("sinfo"), "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            state = (res.stdout + res.stderr).strip()
            if res.returncode == 0 and state and all(s.strip("*~#") == "idle" for s in state.split()):
                return None
            time.sleep(0.5)
        return (
            f"the node did not become idle within {timeout} s (sinfo: {state!r}); slurmd log: {self.tail('slurmd.log')}"
        )

    def tail(self, name, n=600):
        p = self.base / name
        return p.read_text(errors="replace")[-n:] if p.exists() else ""

    def stop(self):
        subprocess.run([_which("scancel"), "--full", "-u", "root"], capture_output=True, env=self.env, timeout=20)
        for _name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
        # daemons the foreground processes may have left behind, by their pid files only
        for pidfile in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
            try:
                pid = int((self.base / pidfile).read_text().split()[0])
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass
        if getattr(self, "wrote_conf", False) and ETC_CONF.exists() and ETC_CONF.read_text().startswith(MARK):
            ETC_CONF.unlink()


@pytest.fixture
def cluster(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    partitions = list(yaml.safe_load((PROFILE / "partitions.yaml").read_text())["partitions"])
    # short base path: slurmd's and munged's socket paths must stay short
    base = Path(tmp_path_factory.mktemp("slurm"))
    c = LocalSlurm(base, partitions)
    try:
        problem = c.start()
        if problem:
            pytest.skip(f"could not start a local SLURM cluster: {problem}")
        yield c
    finally:
        c.stop()


def test_profile_is_valid_yaml_and_names_the_plugin():
    prof = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert prof["executor"] == "slurm"
    assert prof["slurm-status-command"] == "squeue"
    assert (PROFILE / prof["slurm-partition-config"]).exists()
    parts = yaml.safe_load((PROFILE / "partitions.yaml").read_text())["partitions"]
    assert any(p.get("max_gpu", 0) > 0 for p in parts.values()) and any(
        p.get("max_gpu", 0) == 0 for p in parts.values()
    )
    assert set(prof["set-scatter"]) == {"corpus", "decode"}


@pytest.mark.slow
def test_smoke_jobs_run_through_sbatch(cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    target = "results/corpus/shard_1-of-2.parquet"
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--profile",
        str(PROFILE),
        # localhost only: the smoke config's shard counts, quick status checks, kept logs
        "--set-scatter",
        "corpus=2",
        "decode=1",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--slurm-keep-successful-logs",
        "--latency-wait",
        "5",
        "--retries",
        "0",
        "--jobs",
        "2",
        target,
    ]
    env = {
        **cluster.env,
        "HF_HUB_OFFLINE": "1",
        "TQDM_DISABLE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", ""), *SBIN]),
    }
    t0 = time.time()
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the plugin ignores SIGTERM
        out, _ = proc.communicate()
        pytest.fail(
            f"snakemake --profile profiles/slurm did not finish in 240 s:\n{out[-4000:]}\n"
            f"slurmctld: {cluster.tail('slurmctld.log', 2000)}"
        )
    elapsed = time.time() - t0
    detail = f"{out[-4000:]}\nslurmctld log: {cluster.tail('slurmctld.log', 1500)}"
    assert proc.returncode == 0, detail
    assert (work / target).stat().st_size > 0
    assert (work / "results/prompts/eval.parquet").exists() and (work / "results/teacher").is_dir()

    # every job was submitted with sbatch: snakemake names the SLURM job ids ...
    jobids = set(re.findall(r"SLURM jobid (\d+)", out))
    assert len(jobids) == 3, detail  # train_teacher, prompts, corpus_shard
    # ... the controller allocated and completed them ...
    ctl = cluster.tail("slurmctld.log", 10**7)
    for j in jobids:
        assert re.search(rf"JobId={j}\b.*(done|WEXITSTATUS 0)", ctl), (
            f"job {j} not completed in slurmctld log\n{detail}"
        )
    # ... and the plugin kept one log per job, named by rule and job id
    slurm_logs = work / ".snakemake" / "slurm_logs"
    logs = {p.relative_to(slurm_logs).parts[0]: p for p in slurm_logs.rglob("*.log")}
    assert set(logs) == {"rule_train_teacher", "rule_prompts", "rule_corpus_shard"}, sorted(logs)
    assert {p.stem for p in logs.values()} == jobids
    assert (
        "Finished jobid: 0" in logs["rule_corpus_shard"].read_text()
        or "1 of 1 steps (100%) done" in logs["rule_corpus_shard"].read_text()
    )
    # the partition file sent these CPU jobs to the CPU partition
    assert re.search(r"Auto-selected partition 'cpu'", out), detail
    print(f"3 SLURM jobs in {elapsed:.0f} s: {sorted(jobids)}")
