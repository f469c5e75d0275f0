"""The two code domains of the tiny world: `code` (real short functions from the local Python
standard library, too many to memorise) and `code-ru` (templated list functions described in
Ruvian, fully determined by the prompt)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import random
import textwrap

_CODE_MODULES = [
    "bisect",
    "colorsys",
    "fnmatch",
    "genericpath",
    "glob",
    "heapq",
    "keyword",
    "posixpath",
    "shlex",
    "statistics",
    "string",
    "textwrap",
    "calendar",
    "base64",
    "quopri",
    "random",
    "fractions",
    "difflib",
    "ntpath",
    "copy",
    "operator",
    "functools",
    "html",
    "json.encoder",
    "json.decoder",
    "urllib.parse",
    "email.utils",
    "tokenize",
    "ipaddress",
    "csv",
    "gettext",
]


@functools.lru_cache(maxsize=1)
def stdlib_functions() -> tuple[tuple[str, str, str], ...]:
    """Short top-level functions from local stdlib sources: (module, name, source).

    Deterministic for a given Python installation: fixed module list, sorted output.
    """
    out = []
    for modname in _CODE_MODULES:
        try:
            mod = importlib.import_module(modname)
            src = inspect.getsource(mod)
        except Exception:  # module missing on this Python: skip it (deterministically)
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        lines = src.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("__"):
                continue
            body = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            body = _strip_docstring(body)
            if not body.isascii() or not (60 <= len(body) <= 320):
                continue
            out.append((modname, node.name, body))
    out.sort()
    return tuple(out)


def _strip_docstring(src: str) -> str:
    tree = ast.parse(textwrap.dedent(src))
    fn = tree.body[0]
    if (
        fn.body
        and isinstance(fn.body[0], ast.Expr)
        and isinstance(getattr(fn.body[0], "value", None), ast.Constant)
        and isinstance(fn.body[0].value.value, str)
    ):
        lines = src.splitlines()
        doc = fn.body[0]
        keep = lines[: doc.lineno - 1] + lines[doc.end_lineno :]
        if len(fn.body) == 1:
            keep.append(" " * (doc.col_offset) + "pass")
        src = "\n".join(keep)
    return "\n".join(line.rstrip() for line in src.splitlines() if line.strip())


def code_en(rng: random.Random) -> tuple[str, str]:
    funcs = stdlib_functions()
    mod, name, body = funcs[rng.randrange(len(funcs))]
    header = body.splitlines()[0].strip()
    prompt = f"Write the Python function {name} from the {mod} module: {header}"
    return prompt, body


_CODE_RU_TASKS = [
    # (Ruvian description, function name, body template)
    (
        "summu spiska",
        "sum_{x}",
        "def sum_{x}({a}):\n    total = 0\n    for v in {a}:\n        total += v\n    return total",
    ),
    (
        "maksimum spiska",
        "max_{x}",
        "def max_{x}({a}):\n    best = {a}[0]\n    for v in {a}:\n"
        "        if v > best:\n            best = v\n    return best",
    ),
    (
        "chislo elementov",
        "count_{x}",
        "def count_{x}({a}):\n    n = 0\n    for _ in {a}:\n        n += 1\n    return n",
    ),
    (
        "obratnyj spisok",
        "reverse_{x}",
        "def reverse_{x}({a}):\n    out = []\n    for v in {a}:\n        out.insert(0, v)\n    return out",
    ),
    ("chetnye elementy", "even_{x}", "def even_{x}({a}):\n    return [v for v in {a} if v % 2 == 0]"),
    ("kvadraty elementov", "squares_{x}", "def squares_{x}({a}):\n    return [v * v for v in {a}]"),
    (
        "minimum spiska",
        "min_{x}",
        "def min_{x}({a}):\n    best = {a}[0]\n    for v in {a}:\n"
        "        if v < best:\n            best = v\n    return best",
    ),
]
_CODE_RU_NOUNS = ["items", "values", "nums", "scores", "prices", "ages", "sizes", "counts"]


def code_ru(rng: random.Random) -> tuple[str, str]:
    desc, fname, body = rng.choice(_CODE_RU_TASKS)
    x = rng.choice(_CODE_RU_NOUNS)
    a = rng.choice(["xs", "data", "seq", "arr"])
    name = fname.format(x=x)
    prompt = f"Napishi funkciju {name}({a}) na Pitone: {desc}."
    return prompt, body.format(x=x, a=a)
