"""CUDA-clean without a GPU (issue 52): code that meets a model's tensors keeps them on the model's device
and copies them to the host only through `.cpu()`.

On an H200 `orthrus sampling measure` crashed on `total_variation(out, p_single).numpy()` of a CUDA
tensor after every CPU test had passed: on a CPU, a tensor built without `device=`, a `.numpy()` without
`.cpu()` and a generator of the wrong device all work. Two checks catch that class here:

- At run time, an emulated accelerator (`emulated_device`): the model's parameters, and every tensor
  built with `device=` its device, are CPU tensors that report the device `meta` (the one device a CPU
  build of torch reports without a backend); every torch call on them runs the same call on their CPU
  data, so results must equal the CPU run's bit for bit. It refuses what CUDA refuses, with CUDA's
  message: `.numpy()` or `np.asarray` of a device tensor, a host tensor of one or more dimensions in an
  op with device tensors (a 0-dim one, a host index of a device tensor and `to`/`copy_` pass, as on
  CUDA), a generator of the other device than the tensors it draws for (`torch.Generator()` without
  `device=`). On it run: the sampling audit (`orthrus.audit.sampling.measure`, both parts), the loop
  with every decoder, the forensics' replays, the perplexity scorer, the distillation losses. Branches
  on `device.type == "cuda"` (autocast) are not taken. The crash above fails
  `test_the_sampling_audit_runs_on_a_device`: "TypeError: can't convert cuda:0 device type tensor to
  numpy. Use Tensor.cpu() to copy the tensor to host memory first."
- Over the code, for what no test runs on the emulator (training, lm-eval, the teacher): every
  `.numpy()` in orthrus/ and workflow/scripts/ reads a `.cpu()` copy (`numpy_without_cpu`), and every
  tensor factory and `torch.Generator` in the modules that meet a model names its device
  (`factories_without_device`), unless a trailing `# host: why` comment (or `HOST`, for a function
  that builds a whole host batch) says it is a host value. The crash above fails
  `test_every_numpy_reads_a_cpu_copy` too."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import tokenize
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import teacher_and_orthrus, word_tokenizer
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

ROOT = Path(__file__).resolve().parent.parent

# ---- the emulated accelerator

DEVICE, CPU = torch.device("meta"), torch.device("cpu")
T = torch.Tensor
NUMPY = "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
# what a device tensor answers itself (its own metadata); everything else is asked of its CPU data
OWN_PROPERTIES = {"device", "is_cpu", "is_cuda", "is_meta"}


class OnDevice(torch.Tensor):
    """A CPU tensor (`elem`) that reports the emulated device; only `Emulator` computes with it."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=DEVICE)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} reached an emulated device tensor outside the emulator")


class Generator(torch.Generator):
    """`torch.Generator(device=...)` as the emulator's: a CPU generator that knows which device it was
    made for (a real CUDA generator draws other numbers, so the two runs could not be compared)."""

    def __new__(cls, device="cpu"):
        g = super().__new__(cls)
        g.on_device = torch.device(device).type == DEVICE.type
        return g

    def __init__(self, device="cpu"):
        pass


def _device(x) -> torch.device | None:
    return torch.device(x) if isinstance(x, (str, torch.device)) and x != "" else None


def _unwrap(tree):
    return tree_map(lambda x: x.elem if isinstance(x, OnDevice) else x, tree)


def _wrap(tree):
    return tree_map(lambda x: OnDevice(x) if type(x) in (torch.Tensor, torch.nn.Parameter) else x, tree)


def _same_device(func, args, kwargs) -> None:
    """CUDA's refusals of a host tensor beside a device tensor (see the module docstring)."""
    checked = (args, kwargs)
    if func in (T.__getitem__, T.__setitem__):
        if not isinstance(args[0], OnDevice) and any(isinstance(t, OnDevice) for t in tree_flatten(args[1])[0]):
            raise RuntimeError("indices should be either on cpu or on the same device as the indexed tensor (cpu)")
        checked = (args[0], args[2:])
    for t in tree_flatten(checked)[0]:
        if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.dim() > 0:
            name = getattr(func, "__name__", func)
            raise RuntimeError(f"Expected all tensors to be on the same device, but found cuda:0 and cpu ({name})")


class Emulator(TorchFunctionMode):
    """Every torch call, at the Python level (below it a composite op would decompose otherwise than
    on plain tensors, and the bits would differ): checked as CUDA checks it, then run on the CPU data,
    its tensors wrapped again when it ran on the device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        own = bool(args) and isinstance(args[0], OnDevice)
        if own and getattr(func, "__name__", "") == "__get__" and func.__self__.__name__ in OWN_PROPERTIES:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args)
        if own and func is T.tolist:
            return args[0].elem.tolist()
        if own and func in (T.numpy, T.__array__):
            raise TypeError(NUMPY)
        target = _device(kwargs.get("device"))
        if func is T.to:
            target = next((d for d in map(_device, args[1:]) if d is not None), target)
        elif func is T.cpu:
            target = CPU
        any_on = any(isinstance(t, OnDevice) for t in tree_flatten((args, kwargs))[0])
        on = target.type == DEVICE.type if target is not None else any_on
        g = kwargs.get("generator")
        if g is not None and getattr(g, "on_device", False) != on:
            have, want = ("cuda", "cpu") if getattr(g, "on_device", False) else ("cpu", "cuda")
            raise RuntimeError(f"Expected a '{want}' device type for generator but found '{have}'")
        if any_on and func not in (T.to, T.cpu, T.copy_):
            _same_device(func, args, kwargs)
        if on and target is not None:
            args = tuple(CPU if _device(a) == target else a for a in args)
            kwargs = kwargs | {"device": CPU} if "device" in kwargs else kwargs
        out = func(*_unwrap(args), **_unwrap(kwargs))
        if own and out is args[0].elem:  # in place; or a host copy that torch, on the CPU, did not copy
            return args[0] if on else out.clone()
        if on and isinstance(out, type(iter(()))):
            return iter(_wrap(list(out)))
        return _wrap(out) if on else out


@contextlib.contextmanager
def emulated_device(monkeypatch):
    """The emulator for the block, with `torch.Generator` its stand-in."""
    monkeypatch.setattr(torch, "Generator", Generator)
    with Emulator():
        yield


def to_device(model):
    """`model.to(<the emulated device>)`: its parameters and buffers as device tensors (one per shared one)."""
    moved = {}
    for m in model.modules():
        for name, p in m._parameters.items():
            if p is not None:
                moved.setdefault(id(p), torch.nn.Parameter(OnDevice(p.detach()), requires_grad=p.requires_grad))
                m._parameters[name] = moved[id(p)]
        for name, b in m._buffers.items():
            if b is not None:
                m._buffers[name] = OnDevice(b)
    return model


def test_the_emulated_device_fails_where_cuda_does(monkeypatch):
    """The emulator is not vacuous: what CUDA refuses, it refuses; what CUDA allows, it allows."""
    with emulated_device(monkeypatch):
        x = torch.arange(6.0, device=DEVICE).reshape(2, 3)
        host_generator = torch.Generator().manual_seed(0)
        refused = [
            (TypeError, "can't convert cuda:0 device type tensor to numpy", lambda: x.numpy()),
            (TypeError, "to numpy", lambda: np.asarray(x.double())),
            (RuntimeError, "same device", lambda: x + torch.ones(3)),
            (RuntimeError, "same device", lambda: torch.cat([x, torch.zeros(1, 3)])),
            (RuntimeError, "generator", lambda: torch.multinomial(x.softmax(-1), 1, generator=host_generator)),
            (RuntimeError, "generator", lambda: torch.rand(2, generator=host_generator, device=DEVICE)),
            (RuntimeError, "generator", lambda: torch.rand(2, generator=torch.Generator(device=DEVICE))),
            (RuntimeError, "indices", lambda: torch.zeros(3)[torch.tensor([0], device=DEVICE)]),
        ]
        for error, match, call in refused:
            with pytest.raises(error, match=match):
                call()
        # allowed: a host copy, scalars, a 0-dim host tensor, a host index, copies across devices
        assert x.device == DEVICE and (x * 2).device == DEVICE and float(x.sum()) == 15.0
        assert x.cpu().numpy().tolist() == x.tolist() == [[0, 1, 2], [3, 4, 5]]
        assert type(x.cpu()) is torch.Tensor and type(x.to("cpu")) is torch.Tensor
        assert (x + torch.zeros(())).device == DEVICE and int(x[1, 2]) == 5
        assert x[torch.tensor([1])].tolist() == [[3, 4, 5]] and torch.ones(3).to(DEVICE).device == DEVICE
        g = torch.Generator(device=DEVICE).manual_seed(0)
        assert torch.multinomial(x.softmax(-1), 1, generator=g).device == DEVICE
        y = torch.zeros(2, 3, device=DEVICE)
        y[0] = x[1]
        assert y.tolist() == [[3, 4, 5], [0, 0, 0]]


# ---- the code that runs on it


def _model_and_tokenizer():
    _, model = teacher_and_orthrus(0, shift=2.0, block_size=4)
    return model, word_tokenizer()


# the sampling section, small: one temperature with and without top-p, a two-sample test with top-k
TWO_SAMPLE = dict(enabled=True, precision="fp32", temperature=0.5, top_p=None, top_k=20, n_samples=3, m=4, alpha=0.05)
# N planned between 3 and 6 from two runs of the planted loop (orthrus/audit/known_p.py)
TWO_SAMPLE |= dict(n_samples_max=6, power=0.95, plan_trajectories=2)
SAMPLING = dict(seed=3, temperatures=[0.7], top_p=[None, 0.9], prompts_per_domain=1, max_new_tokens=10)
SAMPLING["two_sample"] = TWO_SAMPLE | {"prompts_per_domain": 1, "domains": None}


def _measure(monkeypatch, device: bool):
    from orthrus.audit import sampling
    from orthrus.audit.settings import SampledAudit, TwoSample
    from orthrus.models import loading
    from orthrus.options import DecodeOptions

    model, tok = _model_and_tokenizer()
    # built without the section's checks: 3 to 6 samples, under its floor of 10, keep the test quick
    settings = SampledAudit.model_construct(
        **SAMPLING | {"two_sample": TwoSample.model_construct(**SAMPLING["two_sample"])}
    )
    prompts = pd.DataFrame(
        {"prompt_id": ["a", "b"], "domain": ["x", "y"], "prompt": ["w5 w9 w17 w3", "w22 w40 w7 w8 w2"]}
    )
    monkeypatch.setattr(loading, "load_model", lambda path, options, dev: (model, tok))
    base = DecodeOptions(attention="eager", eos="config", message="none")
    run = lambda: sampling.measure("tiny", "tiny", prompts, base, settings, ["fp32"], ["eager"], "cuda")  # noqa: E731
    if not device:
        return run()
    with emulated_device(monkeypatch):
        to_device(model)
        return run()


def test_the_sampling_audit_runs_on_a_device(monkeypatch):
    """`orthrus sampling measure`'s work, both parts, on the emulated device: it runs (the crash of
    issue 52 fails here), and its rows are the CPU run's, bit for bit (the env aside: it names the device)."""
    on_cpu = _measure(monkeypatch, device=False)
    on_device = _measure(monkeypatch, device=True)
    for cpu, dev in zip(on_cpu, on_device):
        assert len(cpu) and list(cpu.columns) == list(dev.columns)
        same = [c for c in cpu.columns if c not in ("env", "seconds")]
        pd.testing.assert_frame_equal(cpu[same], dev[same], check_exact=True)
    assert on_device[0]["tv"].map(len).sum() > 0
    # every row records its cell's SDPA kernels (counted on its own calls), on either device
    for rows in (*on_cpu, *on_device):
        assert all("sdpa_backends" in json.loads(e) for e in rows["env"])


def _decodes(model, tok):
    """What the loop, the forensics' replays and the perplexity scorer return for one prompt, with
    every decoder of the loop; plain values, comparable between devices."""
    from orthrus.analysis.perplexity import response_scores
    from orthrus.audit.forensics import replay_verify, stepwise_at
    from orthrus.decode.loop import generate
    from orthrus.options import DecodeOptions

    prompt = tok("w5 w9 w17 w3 w60", add_special_tokens=False)["input_ids"]
    ids = torch.tensor(prompt, device=model.device)
    out = {}
    for decoder, extra in [
        ("ar", {}),
        ("orthrus", {}),
        ("orthrus", {"verify_guard": 0.5}),
        ("orthrus", {"temperature": 0.8, "top_k": 30, "top_p": 0.9}),
        ("orthrus-lossy", {"temperature": 0.8}),
    ]:
        o = DecodeOptions(decoder=decoder, max_new_tokens=12, eos="config", **extra)
        g = torch.Generator(device=model.device).manual_seed(1)
        res = generate(model, ids, o, generator=g if o.temperature else None)
        out[(decoder, str(extra))] = (res.tokens.tolist(), res.stats["accepted"])
    ref = out[("ar", "{}")][0]
    out["oracle"] = generate(model, ids, DecodeOptions(decoder="oracle", max_new_tokens=12), oracle=ref).tokens.tolist()
    logits, hidden, tokens, blocks = replay_verify(model, prompt, DecodeOptions(max_new_tokens=12), 5)
    step = stepwise_at(model, prompt, ref, [5])[5]
    out["replay"] = (logits.tolist(), [h.tolist() for h in hidden], tokens, blocks, step[0].tolist())
    out["ppl"] = response_scores(model, prompt, ref)
    return out


def test_the_loop_and_the_replays_run_on_a_device(monkeypatch):
    """The decoding loop (every decoder, greedy and sampled, guarded), the forensics' step-by-step and
    verify replays and the perplexity scorer on the emulated device: the CPU run's values."""
    model, tok = _model_and_tokenizer()
    on_cpu = _decodes(model, tok)
    with emulated_device(monkeypatch):
        on_device = _decodes(to_device(model), tok)
    assert on_device == on_cpu


def test_the_distillation_losses_run_on_a_device(monkeypatch):
    """One micro-batch's loss, single-pass and block by block, on the emulated device: the CPU's."""
    from orthrus.distill.data import make_batch
    from orthrus.distill.loss import block_loss
    from orthrus.distill.reference import blockwise_loss

    model, _ = _model_and_tokenizer()
    seqs = [np.arange(2, 20, dtype=np.int64), np.arange(30, 42, dtype=np.int64)]
    batch = make_batch(seqs, [[0, 5], [3]], model.block_size, np.ones(model.block_size), 95, 0)

    def losses():
        with torch.no_grad():
            loss, stats = block_loss(model, batch, "mix", 0.5)
            on = {k: v.to(model.device) for k, v in batch.items()}
            return float(loss), stats, float(blockwise_loss(model, on, "mix", 0.5))

    on_cpu = losses()
    with emulated_device(monkeypatch):
        to_device(model)
        on_device = losses()
    assert on_device == on_cpu


@pytest.mark.parametrize(
    "cuda, started, given, deterministic, expected",
    [
        (True, False, None, True, ":4096:8"),  # a GPU, before CUDA starts: set
        (True, False, ":16:8", True, ":16:8"),  # the caller's own setting is kept
        (True, True, None, True, None),  # CUDA already started: too late to hold, torch's warning says so
        (True, False, None, False, None),  # torch's defaults asked for
        (False, False, None, True, None),  # no GPU: the CPU's records stay as they were
    ],
)
def test_deterministic_mode_fixes_cublas_workspace_before_cuda_starts(
    monkeypatch, cuda, started, given, deterministic, expected
):
    """`configure` on CUDA: deterministic mode holds for cuBLAS only with CUBLAS_WORKSPACE_CONFIG set
    before its first call (torch raises without it, or warns under warn_only)."""
    from orthrus.models.precision import configure

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: started)
    if given is None:
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    else:
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", given)
    # the flags are process-wide: left as the other tests found them
    cudnn, matmul, det = torch.backends.cudnn, torch.backends.cuda.matmul, torch.utils.deterministic
    flags = [(cudnn, "deterministic"), (cudnn, "benchmark"), (cudnn, "allow_tf32"), (matmul, "allow_tf32")]
    flags.append((det, "fill_uninitialized_memory"))
    before = [getattr(m, f) for m, f in flags], torch.get_float32_matmul_precision()
    algorithms = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        configure("fp32", deterministic=deterministic)
    finally:
        torch.use_deterministic_algorithms(algorithms[0], warn_only=algorithms[1])
        torch.set_float32_matmul_precision(before[1])
        for (m, f), v in zip(flags, before[0]):
            setattr(m, f, v)
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") == expected


# ---- the rules over the code

# the modules whose tensors meet a model's (decoders, audits, training, lm-eval, data generation)
MODEL_CODE = [
    "orthrus/decode",
    "orthrus/audit",
    "orthrus/distill",
    "orthrus/models",
    "orthrus/lmeval",
    "orthrus/data",
    "orthrus/engines/transformers_engine.py",
    "orthrus/analysis/perplexity.py",
    "orthrus/world/teacher.py",
]
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "eye"}
FACTORIES |= {"rand", "randn", "randint", "randperm", "Generator"}
# functions whose tensors are host values by design: `path:function` -> why
HOST = {
    "orthrus/distill/data.py:make_batch": "the micro-batch on the host; block_loss moves it to the model's device",
    "orthrus/world/teacher.py:_batch": "a training batch on the host; _fit moves it to the model's device",
    "orthrus/distill/train.py:StepSums.__init__": "the step's logged sums, floats on the host",
    "orthrus/distill/train.py:StepSums.add": "the step's logged sums, floats on the host",
    # under torchrun on GPUs the group is NCCL, which reduces device tensors only: dist.all_reduce_sum
    # copies a host tensor to the process's GPU and back (tests/test_train.py's NCCL check)
    "orthrus/distill/train.py:StepSums.reduce": "the step's logged sums; all_reduce_sum carries them to NCCL",
}


def _files(paths, root: Path) -> list[Path]:
    return sorted(p for x in paths for p in ([root / x] if x.endswith(".py") else (root / x).rglob("*.py")))


def _host_lines(source: str) -> set[int]:
    """Lines with a trailing `# host` comment (`# host: why`)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0] for t in tokens if t.type == tokenize.COMMENT and re.match(r"#\s*host\b", t.string)}


def _calls(path: Path):
    """(qualified name of the enclosing function, call node) for every call in `path`."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    def walk(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                yield ".".join(scope), child
            yield from walk(child, [*scope, child.name] if isinstance(child, scopes) else scope)

    yield from walk(ast.parse(path.read_text(), filename=str(path)), [])


def _deviceless_factory(call: ast.Call) -> str | None:
    """`torch.NAME` when the call is a factory of FACTORIES without `device=`."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch":
        if f.attr in FACTORIES and not any(k.arg == "device" for k in call.keywords):
            return f"torch.{f.attr}"
    return None


def factories_without_device(paths, root: Path = ROOT) -> list[str]:
    """`path:line torch.NAME(...)` for every factory call without `device=` that no `# host` or HOST excuses."""
    out = []
    for path in _files(paths, root):
        rel, host = path.relative_to(root).as_posix(), _host_lines(path.read_text())
        for scope, call in _calls(path):
            name = _deviceless_factory(call)
            if name and not ({call.lineno, call.end_lineno} & host or f"{rel}:{scope}" in HOST):
                out.append(f"{rel}:{call.lineno} {name}(...)")
    return out


def _through_cpu(node) -> bool:
    """Whether an expression is a chain of calls, attributes and subscripts with a `.cpu()` (or a
    `.to("cpu")`) in it."""
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            to_cpu = node.func.attr == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu" for a in node.args)
            if node.func.attr == "cpu" or to_cpu:
                return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def numpy_without_cpu(paths, root: Path = ROOT) -> list[str]:
    """`path:line .numpy()` for every `.numpy()` whose receiver is no `.cpu()` copy and has no `# host` comment."""
    out = []
    for path in _files(paths, root):
        rel, host = path.relative_to(root).as_posix(), _host_lines(path.read_text())
        for _, call in _calls(path):
            f = call.func
            if isinstance(f, ast.Attribute) and f.attr == "numpy" and not call.args and not call.keywords:
                if not _through_cpu(f.value) and call.lineno not in host:
                    out.append(f"{rel}:{call.lineno} .numpy()")
    return out


def test_every_numpy_reads_a_cpu_copy():
    found = numpy_without_cpu(["orthrus", "workflow/scripts"])
    assert not found, "copy to the host first, .cpu().numpy() (or mark a host array `# host: why`):\n" + "\n".join(
        found
    )


def test_every_tensor_factory_near_a_model_names_its_device():
    found = factories_without_device(MODEL_CODE)
    assert not found, "pass device= (the model's), or mark a host value `# host: why`:\n" + "\n".join(found)


def test_every_host_exemption_is_still_needed():
    """An entry of HOST whose function no longer builds a tensor without `device=` is stale."""
    stale = [
        entry
        for entry in HOST
        if not any(s == entry.split(":")[1] and _deviceless_factory(c) for s, c in _calls(ROOT / entry.split(":")[0]))
    ]
    assert not stale, f"remove these HOST entries: {stale}"


def test_the_rules_see_the_crash_of_issue_52(tmp_path):
    """The rules are not vacuous: the line that crashed on the H200, a generator without a device and
    a tensor built without one are found; their fixed and marked forms are not."""
    pkg = tmp_path / "orthrus" / "audit"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text(
        "import torch\n\n\n"
        "def f(out, p, model):\n"
        "    a = total_variation(out, p).numpy()\n"
        "    b = total_variation(out, p).cpu().numpy()\n"
        "    c = out.detach().to('cpu').numpy()\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    t = torch.tensor([1, 2])\n"
        "    u = torch.tensor([1, 2], device=model.device)\n"
        "    v = torch.zeros(3)  # host: a count\n"
        "    return a, b, c, g, t, u, v\n"
    )
    assert numpy_without_cpu(["orthrus"], tmp_path) == ["orthrus/audit/m.py:5 .numpy()"]
    assert factories_without_device(["orthrus/audit"], tmp_path) == [
        "orthrus/audit/m.py:8 torch.Generator(...)",
        "orthrus/audit/m.py:9 torch.tensor(...)",
    ]
