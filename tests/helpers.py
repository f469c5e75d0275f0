"""The tests' factories: tiny models, the word tokenizer, prompt sets saved as the stages read them
(conftest.py holds the fixtures built on them)."""

import os
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from orthrus import OrthrusForCausalLM
from orthrus.errors import ConfigError
from orthrus.plan.study_config import load

ROOT = Path(__file__).resolve().parents[1]
VOCAB, EOS, MASK = 96, 1, 95

# the backbone families Orthrus is built on (orthrus.models.modeling.FAMILIES); Llama has no q/k norms
FAMILIES = {"qwen3": (Qwen3ForCausalLM, Qwen3Config), "llama": (LlamaForCausalLM, LlamaConfig)}


def tiny_config(attn="eager", init=0.2, vocab=VOCAB, layers=2, positions=256, family="qwen3"):
    return FAMILIES[family][1](
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        initializer_range=init,
        eos_token_id=EOS,
        attn_implementation=attn,
    )


def tiny_base(seed=0, attn="eager", init=0.2, family="qwen3", **kw):
    torch.manual_seed(seed)
    return FAMILIES[family][0](tiny_config(attn, init, family=family, **kw)).eval()


def tiny_orthrus(
    seed=0, block_size=8, diffusion="random", attn="eager", init=0.2, dtype=torch.float32, noise=1e-3, peaked=0.0, **kw
):
    """A tiny Orthrus whose diffusion view is random (acceptance ~0) or the AR view plus noise.

    A random backbone mostly predicts from the current token, which the diffusion view sees
    only as a mask. `peaked` adds a direction shared by all embeddings, which makes the
    predictions depend less on the input token, so a noisy copy of the AR view proposes what
    the AR view then says: high acceptance.
    """
    base = tiny_base(seed, attn, init, **kw)
    if peaked:
        with torch.no_grad():
            shared = torch.randn(base.config.hidden_size, generator=torch.Generator().manual_seed(seed + 7))
            base.model.embed_tokens.weight.add_(peaked * init * shared)
    model = OrthrusForCausalLM.from_base(base, block_size=block_size, mask_token_id=MASK)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for p in model.diffusion_parameters():
            if diffusion == "random":
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 0.1) + (p.dim() == 1))
            elif diffusion == "noisy":
                p.add_(torch.randn(p.shape, generator=g) * noise)
    return model.to(dtype).eval()


def word_tokenizer(size=MASK):
    """A word-level tokenizer for the tiny models: `w{i}` is token i, w1 EOS, w0 padding, and a
    chat template that joins the messages' text."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    # special tokens match inside words unless `single_word`: "w19" would read as w1 + "9"
    eos, pad = (AddedToken(t, single_word=True, special=True) for t in ("w1", "w0"))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=pad)
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return fast


def teacher_and_orthrus(seed, attn="eager", init=0.2, shift=0.0, shift_seed=0, block_size=8, noise=1e-2, noise_seed=0):
    """A teacher and an Orthrus model whose AR view is that teacher and whose diffusion view is a
    noisy copy of it. `shift` adds a direction shared by every embedding (predictions less tied to
    the input token), so the noisy drafts are accepted more often."""
    base = tiny_base(seed, attn, init)
    with torch.no_grad():
        base.model.embed_tokens.weight.add_(
            shift * torch.randn(base.config.hidden_size, generator=torch.Generator().manual_seed(shift_seed))
        )
    teacher = Qwen3ForCausalLM(base.config).eval()
    teacher.load_state_dict(base.state_dict())
    orth = OrthrusForCausalLM.from_base(base, block_size=block_size, mask_token_id=MASK)
    g = torch.Generator().manual_seed(noise_seed)
    with torch.no_grad():
        for p in orth.diffusion_parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise)
    return teacher, orth


def prompt_frame(prompts) -> pd.DataFrame:
    """A prompt set (`prompt_id`, `domain`, `prompt`) from `{prompt_id: (domain, prompt)}`, a list of
    prompts (ids `p0`, `p1`, ..., one domain `x`) or a DataFrame as it stands."""
    if isinstance(prompts, pd.DataFrame):
        return prompts
    if isinstance(prompts, dict):
        return pd.DataFrame(
            {
                "prompt_id": list(prompts),
                "domain": [d for d, _ in prompts.values()],
                "prompt": [p for _, p in prompts.values()],
            }
        )
    return pd.DataFrame(
        {"prompt_id": [f"p{i}" for i in range(len(prompts))], "domain": ["x"] * len(prompts), "prompt": list(prompts)}
    )


def save_tiny(root: Path, models: dict, prompts=None, tokenizer=None, prompts_file: str = "p.parquet") -> Path:
    """Save what a stage reads under `root`, as a study does: each model of `models` (`{relative
    directory: model}`) with the tokenizer (the word tokenizer unless given), and `prompts` (see
    `prompt_frame`) as `root/prompts_file`. Returns the prompt file's path (or root without prompts)."""
    root = Path(root)
    tokenizer = tokenizer if tokenizer is not None else word_tokenizer()
    for name, model in models.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    if prompts is None:
        return root
    path = root / prompts_file
    path.parent.mkdir(parents=True, exist_ok=True)
    prompt_frame(prompts).to_parquet(path)
    return path


def descendants(root: int) -> list[int]:
    """The processes under `root`, by their parents in /proc (a child in a session of its own among them)."""
    parent = {}
    for d in Path("/proc").iterdir():
        try:
            parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    found, todo = [], [root]
    while todo:
        kids = [p for p, pp in parent.items() if pp == todo[0]]
        found += kids
        todo = todo[1:] + kids
    return found


def kill(pids) -> None:
    """SIGKILL to each of `pids` still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_bounded(cmd: list[str], timeout: float, logs=(), **kw) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True)` for a command that keeps time bounds of its
    own: past `timeout` every process under it is killed and the test fails naming each one that was
    still there, its state and what it waited in, with the tails of `logs` (a bare TimeoutExpired says
    none of that, and kills only the command, not its children)."""
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pids = [p.pid, *descendants(p.pid)]
        ps = subprocess.run(
            ["ps", "-o", "pid,ppid,pgid,sid,stat,wchan:24,etime,args", "-p", ",".join(map(str, pids))],
            capture_output=True,
            text=True,
        ).stdout
        kill(pids)
        out, err = p.communicate()
        tails = "".join(f"\n--- {f} ---\n{Path(f).read_text()[-1500:]}" for f in logs if Path(f).exists())
        pytest.fail(
            f"{' '.join(map(str, cmd[:2]))} still ran after {timeout} s; its processes:\n{ps}{tails}\n--- stderr ---\n{err[-1500:]}"
        )
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def study(values: dict | None = None):
    """The checked study config of the embedded config.yaml with `values` laid over it, as the engines
    and plans read it (raises ConfigError naming every problem)."""
    return load([ROOT / "config.yaml"], values or {})


def config_problems(values: dict) -> list[str]:
    """Every problem `study(values)` names, [] where it is a valid study."""
    try:
        study(values)
    except ConfigError as e:
        return e.problems
    return []
