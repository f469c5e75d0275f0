"""No decoder or engine is told apart by its name: a stage asks the decoder's row (orthrus/decoders.py)
or the engine's (orthrus/engines/runner.py's ENGINES) for what it needs, so a decoder or an engine
added to the study is a row, not a hunt for the places that test names.

The scan, over the package, workflow/ and the Snakefile (the AST of .py files, the text of .smk files
and the Snakefile): every comparison against a decoder's or an engine's name (==, !=, is, in / not in
with the name or a literal tuple, list or set of names, `.isin([...])`, a `case`); and, in .py files,
the names typed out: a literal tuple, list or set of two or more decoders (or engines), a module
constant bound to one (a second name for a row), one name or another chosen by a condition."""

import ast
import re
from pathlib import Path

from orthrus.decoders import DECODER
from orthrus.engines.runner import ENGINES

ROOT = Path(__file__).resolve().parent.parent
NAMES = frozenset(DECODER) | frozenset(ENGINES)

# Where a name may be compared, and why: the tables themselves (a row is its name). A decoder's own
# code keyed by its name (orthrus/decode/transformers_decoders.py's GENERATE_ARGS, an engine's `name`)
# is a lookup of the row's function, not a comparison, and is not flagged.
ALLOWED = {
    "orthrus/decoders.py",  # the decoder table
    "orthrus/engines/runner.py",  # the engine table (ENGINES)
}


def _literal_names(node) -> list[str]:
    """The decoder or engine names `node` is, or holds as a literal tuple, list or set."""
    if isinstance(node, ast.Constant):
        return [node.value] if node.value in NAMES else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _literal_names(e) if isinstance(e, ast.Constant)]
    return []


def python_offences(source: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison against a decoder's or an engine's name in Python `source`."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.In, ast.NotIn)):
                    hits = (_literal_names(a) if isinstance(a, ast.Constant) else []) + _literal_names(b)
                else:
                    hits = [n for s in (a, b) if isinstance(s, ast.Constant) for n in _literal_names(s)]
                found += [(node.lineno, n) for n in hits]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "isin":
            found += [(node.lineno, n) for a in node.args[:1] for n in _literal_names(a)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, n) for n in _literal_names(node.value)]
        elif isinstance(node, ast.IfExp) and _literal_names(node.body) and _literal_names(node.orelse):
            found += [(node.lineno, n) for n in _literal_names(node.body) + _literal_names(node.orelse)]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            listed = _literal_names(node)
            for table in (DECODER, ENGINES):
                if sum(n in table for n in listed) >= 2:
                    found += [(node.lineno, n) for n in listed if n in table]
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            found += [(node.lineno, n) for n in _literal_names(node.value)]
    return sorted(set(found))


_NAME = "|".join(re.escape(n) for n in sorted(NAMES, key=len, reverse=True))
_LITERAL = rf"""(?P<q>['"])(?P<name>{_NAME})(?P=q)"""
_TEXT = [
    re.compile(rf"{_LITERAL}\s*(?:==|!=|\bis\b|\bnot\s+in\b|\bin\b)"),  # the name on the left
    re.compile(rf"(?:==|!=|\bis(?:\s+not)?)\s*{_LITERAL}"),  # ... on the right
    re.compile(rf"(?P<op>\bin\b|\.isin\()\s*[(\[{{][^)\]}}]*?{_LITERAL}"),  # ... in a literal container
]


def text_offences(source: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison against a name in a Snakemake file's text (a literal
    container after a `for ... in` is a loop, not a comparison)."""
    found = []
    for i, line in enumerate(source.splitlines(), start=1):
        code = line.split("#", 1)[0]
        for pattern in _TEXT:
            for m in pattern.finditer(code):
                op = m.groupdict().get("op")
                if op == "in" and re.search(r"\bfor\s+[\w\s,()]+$", code[: m.start("op")]):
                    continue
                found.append((i, m["name"]))
    return sorted(set(found))


def offences(path: str, source: str) -> list[tuple[int, str]]:
    return python_offences(source) if path.endswith(".py") else text_offences(source)


def scanned() -> list[str]:
    """The package, the workflow and the Snakefile; not the zoo's drivers, which run inside other
    projects' releases and may not import the tables (orthrus/zoo/drivers/__init__.py)."""
    files = [*ROOT.glob("orthrus/**/*.py"), *ROOT.glob("workflow/**/*.py"), *ROOT.glob("workflow/**/*.smk")]
    drivers = ROOT / "orthrus" / "zoo" / "drivers"
    return sorted(str(p.relative_to(ROOT)) for p in files if drivers not in p.parents) + ["Snakefile"]


def test_no_decoder_or_engine_name_is_compared_outside_the_tables():
    found = {}
    for path in scanned():
        if path in ALLOWED:
            continue
        hits = offences(path, (ROOT / path).read_text(encoding="utf-8"))
        if hits:
            found[path] = hits
    assert not found, f"ask the decoder's or the engine's row instead of its name: {found}"


def test_the_scan_finds_the_comparisons_it_forbids():
    old = """
K = 1 if mode == "ar" else opts.block_size
accept_top = 2 if mode == "orthrus-lossy" else 1
if base.decoder != "orthrus":
    pass
LOSSLESS = ("orthrus", "ar")
cells = tv[(tv["decoder"] == "orthrus") & (tv["precision"] == "fp32")]
ext = decode[decode["decoder"].isin(["external", "x"])]
if "oracle" in controls or engine not in ("vllm",):
    pass
match decoder:
    case "assisted":
        pass
PLANTED = "orthrus-lossy"
choices(["vllm", "llamacpp"])
baseline = "ar-ref" if bench["ar_baseline"] == "hf" else "ar"
"""
    assert python_offences(old) == [
        (2, "ar"),
        (3, "orthrus-lossy"),
        (4, "orthrus"),
        (6, "ar"),
        (6, "orthrus"),
        (7, "orthrus"),
        (8, "external"),
        (9, "oracle"),
        (9, "vllm"),
        (12, "assisted"),
        (14, "orthrus-lossy"),
        (15, "llamacpp"),
        (15, "vllm"),
        (16, "ar"),
        (16, "ar-ref"),
    ]
    smk = (
        'if any(e.get("engine") == "llamacpp" for e in entries):\n'
        "    x = 1 if engine in ('transformers', 'x') else 2\n"
        'for d in ("orthrus", "ar"):  # a loop over names\n'
        'params: source="hf", decoder="orthrus"\n'
    )
    assert text_offences(smk) == [(1, "llamacpp"), (2, "transformers")]
    # a name that is not compared (an argument, a key, a model source) is no offence
    assert python_offences('f(decoder="ar"); d["orthrus"]; source == "hf"; x == "ar-refs"') == []
    # nor one decoder beside one engine (a list of packages: transformers, orthrus)
    assert python_offences('VERSIONED = ("torch", "transformers", "orthrus")') == []


def test_the_engines_rows_carry_what_the_rules_and_settings_ask():
    from orthrus.engines.runner import ENGINE_CHOICES, STAND_IN_DECODERS, serves_gguf
    from orthrus.plan.config.generate import schema

    assert ENGINE_CHOICES == ("vllm", "llamacpp", "openai") and [e.name for e in ENGINES.values() if e.stand_in] == [
        "transformers"
    ]
    assert set(STAND_IN_DECODERS) <= set(DECODER)
    defs = schema()["$defs"]  # decode.engines, sampling.engines and decode.external entries
    for entry in ("EngineRun", "SampledEngine"):
        assert defs[entry]["properties"]["engine"]["enum"] == list(ENGINE_CHOICES), entry
    assert defs["External"]["properties"]["stand_in"]["enum"] == list(STAND_IN_DECODERS)
    # the gguf_export rule exists where an entry's engine serves GGUF files (llama.cpp), whichever section
    assert serves_gguf([{"engine": "vllm"}, {"engine": "llamacpp"}]) and not serves_gguf([{"engine": "vllm"}, {}])
