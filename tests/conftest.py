"""The tests' fixtures (the factories they use: tests/helpers.py)."""

import os
import resource
import time
from pathlib import Path

import pytest
import torch
from helpers import MASK, kill, save_tiny

# Tiny models are fastest on one thread, and CI has two cores shared by the test processes.
torch.set_num_threads(1)

_START = time.monotonic()
LONG_S = 120  # a phase this long is named as it ends: CI keeps only its log's tail, so a run cut off still says where its time went
# a limit of 1024 open files (some machines' default) is met by a run that leaks one in each of a few
# hundred tests: every test after it fails at its next open(); the limit is raised to what the machine
# allows, and a growing count is named
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))
    _FILES = f"{_soft} raised to {_hard}" if _hard != _soft else str(_soft)
except (ValueError, OSError):  # an unlimited hard limit the kernel caps lower
    _FILES = str(_soft)
_FDS_SAID = [256]  # a count of open files past this is named
_SAID, _BEGAN = [], []  # said the machine; when the running test began (clock ticks since boot)


def _say(line: str) -> None:
    """One line into the log now, the machine named before the first (a CI log cut off at its time
    limit keeps only its tail, and machines differ)."""
    if not _SAID:
        from orthrus.machine import cpu_model

        _SAID.append(True)
        print(f"\n[machine] {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}, open files {_FILES}")
    print(f"\n[{time.monotonic() - _START:.0f} s] {line}")


def _ticks() -> int:
    """Now, in the clock ticks since boot that /proc/PID/stat states a process's start in."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def pytest_runtest_logstart(nodeid, location):
    _BEGAN[:] = [_ticks()]


def pytest_runtest_logreport(report):
    """A failure, or a phase that took long, in one line as it happens (the summary comes only at the end);
    after each test, the processes it left behind killed and named."""
    if report.failed or report.duration > LONG_S:
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "") if report.failed else ""
        why = f": {' | '.join(crash.splitlines())[:400]}" if crash else ""
        _say(f"{'FAILED' if report.failed else 'took'} {report.nodeid} ({report.when}, {report.duration:.0f} s){why}")
    if report.when != "teardown":
        return
    fds = len(os.listdir("/proc/self/fd"))
    if fds > _FDS_SAID[0]:
        _FDS_SAID[0] = fds + 64  # said again 64 later, not after every test
        _say(f"{fds} files open in the test process after {report.nodeid}")
    if _BEGAN:
        left = _orphans(_BEGAN[0])
        kill(left)
        if left:
            _say(f"LEFT BEHIND by {report.nodeid}, killed: " + "; ".join(f"{p} {c[:120]}" for p, c in left.items()))


def _orphans(since: int) -> dict[int, str]:
    """Processes of this session started since `since` (clock ticks since boot) that lost their parent: a
    child of a test's child that outlived it, as a job does when a test's timeout kills only snakemake.
    {pid: command line}. A daemon starts a session of its own, and what the shell ran before the test
    (a background job of the user's) started before it: neither is one of them."""
    me, session, found = os.getpid(), os.getsid(0), {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            state, ppid, sid, start = fields[0], int(fields[1]), int(fields[3]), int(fields[19])
            if ppid == 1 and sid == session and start >= since and int(d.name) != me and state not in "ZX":
                found[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.fixture
def saved(tmp_path):
    """`save_tiny` under this test's tmp_path: `saved({"teacher": model}, prompts)`."""
    return lambda models, prompts=None, **kw: save_tiny(tmp_path, models, prompts, **kw)


@pytest.fixture
def random_prompts():
    def make(n, seed=0, lo=1, hi=12):
        g = torch.Generator().manual_seed(seed)
        return [
            torch.randint(2, MASK, (int(torch.randint(lo, hi + 1, (1,), generator=g)),), generator=g) for _ in range(n)
        ]

    return make


@pytest.fixture
def verify_kernel_noise(monkeypatch):
    """A verify block that parts from single steps on any CPU, as bf16 sdpa does on some: the AR
    view's logits of a multi-token forward over a non-empty cache (a verify pass; not a prefill,
    not a single step) move by a fixed pseudo-random amount of at most 2^-8 of their magnitude,
    about one bf16 rounding. Every forward of that shape moves alike, so a replay reproduces the
    run and the honest loop still emits its own pass's argmax; only the bits of the verify block
    differ from those of the single steps, which is what a kernel choice does."""
    from transformers.models.qwen3 import modeling_qwen3

    from orthrus.models.cache import NEW, OLD

    original = modeling_qwen3.Qwen3ForCausalLM.forward

    def forward(self, *args, **kwargs):
        cache = kwargs.get(NEW, kwargs.get(OLD))  # the cache, as either release spells its keyword
        past = cache.get_seq_length() if cache is not None else 0  # before this forward appends to it
        out = original(self, *args, **kwargs)
        rows = out.logits.shape[1]
        if past and rows > 1:
            pos = torch.arange(past, past + rows, dtype=torch.float64)[:, None]
            ids = torch.arange(out.logits.shape[-1], dtype=torch.float64)[None]
            wobble = torch.sin(pos * 12.9898 + ids * 78.233) * 2.0**-8
            out.logits = out.logits + (out.logits.double().abs() * wobble).to(out.logits.dtype)
        return out

    monkeypatch.setattr(modeling_qwen3.Qwen3ForCausalLM, "forward", forward)
