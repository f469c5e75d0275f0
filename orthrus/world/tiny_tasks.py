"""The tiny tasks: tiny-world benchmark data for lm-evaluation-harness (the offline Table 7).

Five local tasks, each a JSONL file of documents plus an lm-eval task YAML written next to it
(the YAML templates live in `orthrus/lmeval_tasks/`; `prepare` fills in the task name and the
absolute path of the data, so the directory is self-contained: `--include_path DIR`).

- `tiny_arith` (GSM8K-style): worked arithmetic from the `math` domain, "Compute 3 + 4 - 2.
  Show the steps."; generation, scored by exact match on the final number (`strict-match`:
  "The answer is N"; `flexible-extract`: the last number in the response, as GSM8K's
  flexible extract).
- `tiny_gec`: grammar correction from the `gec-en` domain; generation, scored by exact match
  of the whole response ("Corrected: ...") after stripping surrounding whitespace.
- `tiny_qa`: record lookup from the `qa` domain as a multiple-choice task: after the assistant
  prefix "<free opener> The record for NAME says the color is", which of the ten colours is most likely
  (log-likelihood, through the AR view); scored by accuracy.
- `tiny_code` (HumanEval-like, without executing anything): write a small templated Python
  function from the `code-ru` domain ("Napishi funkciju sum_items(xs) na Pitone: summu
  spiska."); generation, scored by exact match of the function after whitespace normalisation
  that keeps Python's meaning (surrounding whitespace, trailing spaces on a line and blank
  lines ignored; indentation kept).
- `tiny_translate` (WMT-like): Ruvian -> English translation of two sentences from the
  `wmt-ru-en` domain; generation, scored as lm-eval scores its WMT tasks, by corpus chrF
  (the primary metric: partial credit for the words a translation gets right), and by exact
  match of the whole response after stripping surrounding whitespace.

The tasks differ in difficulty for the default tiny teacher: it gets most arithmetic and record
lookups wrong, grammar correction (exact match of two sentences) never right, translation partly
right by chrF and the templated code always right, so the AR-vs-Orthrus comparison has scores away
from 0 and 1 to compare.

A document is its domain's task alone: a prompt of a mixed domain never asks for a story
(`domains.REMARK_SHARE`), so each task has one right answer. Documents come from their own seed stream (`domain_rng(seed, domain, "lmeval")`), separate
from the evaluation ("eval"), distillation ("distill") and tokenizer streams; prompts listed in
`exclude` (e.g. the evaluation and distillation prompt sets) are skipped, and documents are
distinct by prompt text.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from orthrus.world.domains import GENERATORS, QA_VALS, domain_rng

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "lmeval_tasks"
STREAM = "lmeval"
# task -> source domain of the tiny world
TASKS = {
    "tiny_arith": "math",
    "tiny_gec": "gec-en",
    "tiny_qa": "qa",
    "tiny_code": "code-ru",
    "tiny_translate": "wmt-ru-en",
}


def template_path(task: str) -> Path:
    path = TEMPLATES_DIR / f"{task}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"lm-eval task template {path} is missing: the package was installed without its data "
            '(pyproject.toml needs [tool.setuptools.package-data] "orthrus.lmeval_tasks" = ["*.yaml"])'
        )
    return path


def _arith_doc(prompt: str, answer: str) -> dict:
    m = re.search(r"The answer is (-?\d+)\.$", answer)
    assert m, answer
    return {"question": prompt, "answer": answer, "target": m.group(1)}


def _gec_doc(prompt: str, answer: str) -> dict:
    return {"question": prompt, "answer": answer, "target": answer}


def _qa_doc(prompt: str, answer: str) -> dict:
    m = re.search(r"The record for (\w+) says the color is (\w+) and the age is (\d+)\.", answer)
    assert m, answer
    name, color, _ = m.groups()
    # the reference answer's own words up to the colour (its free opener included)
    return {
        "question": prompt,
        "answer": answer,
        "name": name,
        "prefix": answer[: m.start(2)].rstrip(),
        "choices": list(QA_VALS),
        "gold": QA_VALS.index(color),
        "target": color,
    }


def _text_doc(prompt: str, answer: str) -> dict:
    """The whole reference answer is the target (code, translation)."""
    return {"question": prompt, "answer": answer, "target": answer}


_DOC = {
    "tiny_arith": _arith_doc,
    "tiny_gec": _gec_doc,
    "tiny_qa": _qa_doc,
    "tiny_code": _text_doc,
    "tiny_translate": _text_doc,
}


def make_docs(task: str, n: int, seed: int = 0, exclude=(), max_tries: int = 50) -> list[dict]:
    """`n` documents of `task` (fewer, with a warning from the caller, if the domain runs out)."""
    if task not in TASKS:
        raise KeyError(f"unknown tiny task {task!r}; known: {', '.join(TASKS)}")
    rng: random.Random = domain_rng(seed, TASKS[task], STREAM)
    seen, docs, tries = set(exclude), [], 0
    while len(docs) < n and tries < n * max_tries:
        tries += 1
        prompt, answer = GENERATORS[TASKS[task]](rng)  # the task itself, without a told story
        if prompt in seen:
            continue
        seen.add(prompt)
        docs.append({"id": f"{task}-{len(docs):04d}", **_DOC[task](prompt, answer)})
    return docs


def task_config(task: str, data_file: Path) -> str:
    """The task's YAML: the packaged template with `task` and the data path filled in."""
    text = template_path(task).read_text()
    header = (
        f"# Generated by `orthrus lm-eval prepare-data` from {template_path(task).name}.\n"
        f"task: {task}\n"
        f"dataset_kwargs:\n"
        f"  data_files:\n"
        f"    test: {json.dumps(str(Path(data_file).resolve()))}\n"
    )
    return header + text


def write_task(write_dir: Path, task: str, docs: list[dict], final_dir: Path | None = None) -> None:
    """Write `{task}.jsonl` and `{task}.yaml` into `write_dir`; the YAML points at the data in
    `final_dir` (default `write_dir`), where an atomic move will put it."""
    write_dir = Path(write_dir)
    (write_dir / f"{task}.jsonl").write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in docs))
    final = Path(final_dir or write_dir) / f"{task}.jsonl"
    (write_dir / f"{task}.yaml").write_text(task_config(task, final))
