import functools
import glob
import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "workflow", "scripts"))
from config_check import ConfigError, check_config, load_yaml, typed_overrides
from snakemake.utils import update_config

# the artefact names and vocabularies, and the decoding options, from the package's pure-Python modules
sys.path.insert(0, workflow.basedir)
from orthrus import contracts
from orthrus.decode.options import DecodeOptions
from orthrus.errors import InputError
from orthrus.engines.ingest import cell as external_cell
from orthrus.engines.runner import external_entries as engine_entries
from orthrus.world import subject as shipped_subject

# The schema (defaults filled in), duplicate YAML keys in the config files Snakemake read (it
# keeps the last value silently) and cross-key rules: a bad configuration stops here, naming the
# key, before any job.
_SCHEMA = os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml")
# `--config` values typed by the schema (config_check.typed_overrides): a nested override arrives
# with every value a string
update_config(config, typed_overrides(dict(workflow.config_settings.config), load_yaml(_SCHEMA)))
# `--set-scatter corpus=N` replaces corpus.shards: checked with it (Snakemake itself takes 0)
check_config(config, _SCHEMA, workflow.configfiles, scatter=dict(workflow.resource_settings.overwrite_scatter))

scattergather:
    corpus=config["corpus"]["shards"],
    decode=config["decode"]["shards"],


ENV = "../../envs/orthrus.yaml"
R = "results"
TEACHER = config["teacher"]["name"]
# Per-stage job resources (mem_mb, runtime, gpus, slurm_extra), defaults from the schema. The config
# check filled every schema default in, so the rules index the config directly: no second defaults.
RES = config["resources"]
DEVICE = config["decode"]["device"]


def launcher(gpus):
    """`orthrus`, or torchrun with one process per GPU when a job holds several."""
    return f"torchrun --standalone --nproc_per_node {gpus} -m orthrus.cli" if gpus > 1 else "orthrus"


def settings(section):
    """A config section as JSON for `orthrus <command> --config {params.cfg:q}`."""
    return json.dumps(section, sort_keys=True)


REVISIONS = config["revisions"]


def pinned(path):
    """A hub id as `ID@REV` where `revisions` pins it (the loaders split it again), else as given."""
    return f"{path}@{REVISIONS[path]}" if path in REVISIONS else path


def model_source_path(name, source, path):
    """Where a teacher or draft is: the pipeline builds a tiny one under results/, the package
    ships the fixed subject (checked here, before any job), an hf one is a hub id or directory."""
    if source == "tiny":
        return f"{R}/{name}"
    if source == "shipped":
        _check_shipped_subject()
        return str(shipped_subject.model_dir(name))
    return pinned(path)


@functools.cache
def _check_shipped_subject():
    problems = shipped_subject.check()
    if problems:
        raise ConfigError([f"teacher.source: the shipped subject is damaged: {p}" for p in problems])


def teacher_path():
    return model_source_path("teacher", config["teacher"]["source"], config["teacher"]["path"])


def model_files(path):
    """The config and weight files of a local model directory given in the config (none for a
    hub id): they are inputs, so that new weights at the same path rerun what depends on them.
    Snakemake reads braces even in what an input function returns as wildcards, with no escape,
    so a path with braces gives no inputs: its weights_fingerprint param (taken from the path, not
    as a wildcard pattern) still reruns what depends on it. Glob characters are escaped."""
    path = os.path.expanduser(path)
    if not os.path.isdir(path) or "{" in path or "}" in path:
        return []
    return sorted(glob.glob(os.path.join(glob.escape(path), "*.json")) + glob.glob(os.path.join(glob.escape(path), "*.safetensors")))


# Content fingerprints as params: Snakemake reruns a job whose params changed, and evaluates them
# again once the jobs before it have run. A directory output's timestamp is its own
# `.snakemake_timestamp`, so new weights inside results/teacher would otherwise go unseen, as
# would a changed eval file or local dataset (no Snakemake inputs).
def file_fingerprint(path):
    """A file's SHA-256 from the sidecar its writer stored (`FILE.sha256`, orthrus/models/checkpoint.py)
    while that still describes it, else its size and modification time: cheap for every DAG build
    (weights and datasets can be gigabytes), and new whenever the file is written again."""
    st = os.stat(path)
    try:
        with open(f"{path}.sha256", encoding="utf-8") as f:
            meta = json.load(f)
        if (meta["size"], meta["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
            return meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return f"{st.st_size}:{st.st_mtime_ns}"


def fingerprint(files, root=""):
    """One digest of `files` (names relative to `root`) and their fingerprints; '' for none."""
    if not files:
        return ""
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f"{os.path.relpath(f, root) if root else f}\0{file_fingerprint(f)}\n".encode())
    return h.hexdigest()


def weights_fingerprint(*paths):
    """The config and weight files of each local model directory in `paths` (a hub id has none:
    `revisions` pins it); '' before the directory exists."""
    parts = []
    for path in paths:
        d = os.path.expanduser(path)
        files = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f == "config.json"
                 or f.endswith((".safetensors", ".bin"))] if os.path.isdir(d) else []
        parts.append(fingerprint(files, d))
    return ",".join(parts)


def eval_file_fingerprint():
    """The local prompts.eval_file's SHA-256 (the prompts job refuses one over its size cap); a
    URL is read again only when the config changes (pin it with prompts.eval_file_sha256)."""
    src = config["prompts"].get("eval_file")
    if not src or "://" in src or not os.path.isfile(os.path.expanduser(src)):
        return ""
    path = os.path.expanduser(src)
    if os.path.getsize(path) > 256 * 2**20:
        return file_fingerprint(path)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def dataset_fingerprint():
    """corpus.source hf: the files of a local dataset directory and the corpus.data_files (their
    patterns expanded as `datasets` does, relative to the working directory)."""
    c = config["corpus"]
    if c["source"] != "hf":
        return ""
    files = [glob.glob(os.path.expanduser(f), recursive=True) for f in c["data_files"] or []]
    files = [f for group in files for f in group if os.path.isfile(f)]
    d = os.path.expanduser(c["dataset"] or "")
    if os.path.isdir(d):
        files += [os.path.join(r, f) for r, dirs, names in os.walk(d) for f in names
                  if not f.startswith(".") and not os.path.relpath(r, d).startswith(".")]
    return fingerprint(files)


def teacher_input(wildcards=None):
    return teacher_path() if config["teacher"]["source"] == "tiny" else model_files(teacher_path())


# transformers' speculative decoders (decode.decoders) run on the teacher; `assisted` needs a draft
# model that shares the teacher's tokenizer: a tiny one is trained with it, a hub one must have it
# (config_check.py requires teacher.draft for assisted and rejects a hub draft beside the tiny teacher).
# The audit's controls (decode.controls): the oracle and ar-batched run on the teacher like those
# decoders, orthrus-lossy on each Orthrus model like its loop.
CONTROLS = config["decode"]["controls"]
TEACHER_DECODERS = config["decode"]["decoders"] + [c for c in CONTROLS if c in contracts.TEACHER_CONTROLS]
DRAFT = config["teacher"].get("draft")  # optional: only the assisted decoder needs one


def draft_path():
    return model_source_path("draft", DRAFT["source"], DRAFT["path"])


def draft_input(wildcards):
    """The tiny draft's directory, or a local hf draft's files, for the assisted decoder."""
    if wildcards.decoder != "assisted":
        return []
    return [draft_path()] if DRAFT["source"] == "tiny" else model_files(draft_path())


def reference_input(wildcards):
    """The oracle's drafts: the ar-ref reference of its cell."""
    if wildcards.decoder != "oracle":
        return []
    return [f"{R}/decode/{TEACHER}/ar-ref-{wildcards.precision}-{wildcards.attention}.parquet"]


def draft_args(wildcards):
    """`--draft-path` for the assisted decoder (an argument list, each quoted by `:q`)."""
    return ["--draft-path", draft_path()] if wildcards.decoder == "assisted" else []


def variant_settings(name):
    """A trained variant's settings, its `seed` (default 0) plus the global `seed`: the global seed
    reaches every stage that draws anything (the tiny teacher, its tokenizer and data, the draft,
    the prompts, the distillation, the tiny benchmark documents), so `--config seed=N` is another
    realisation of the whole tiny world; decoding and the teacher's corpus are greedy."""
    s = dict(config["models"][name] or {})
    return s | {"seed": int(s.get("seed") or 0) + int(config["seed"])}


def scatter_index(item):
    """'2-of-4' -> (1, 4): the 0-based shard and the shard count."""
    i, n = item.split("-of-")
    return int(i) - 1, int(n)


CORPUS_SOURCE = config["corpus"]["source"]


def corpus_source_args(wildcards, input):
    """The corpus's source as command-line arguments (a list, each quoted by `:q`): the
    distillation prompts the teacher answers, or a ready prompt-response dataset (corpus.source
    hf: hub id, directory or builder name; config_check requires corpus.dataset then)."""
    if CORPUS_SOURCE == "generate":
        return ["--prompts", input.prompts]
    c = config["corpus"]
    files = [str(f) for f in c["data_files"] or []]
    return (["--dataset", pinned(c["dataset"]), "--dataset-split", c["split"]] + (["--data-files", *files] if files else [])
            + (["--expected-rows", c["expected_rows"]] if c["expected_rows"] else [])
            + ["--datasets-cache", f"{R}/cache/datasets"])  # under results/, not the user's home cache


def cell_options(section, decoder, precision, attention):
    """One decoding cell's whole setting as `DecodeOptions` JSON, built from the validated config
    (`section`: `decode`, or `decode` updated by `tpf`) by the one function that does it."""
    return DecodeOptions.from_config(section, decoder, precision, attention).to_json()


def corpus_shards():
    return gather.corpus(f"{R}/corpus/shard_{{scatteritem}}.parquet")


def final_outputs():
    # the study's tables wherever something is compared with the reference: an Orthrus model, a decoder
    # of transformers' on the teacher (any causal LM) or an engine's file
    studied = ORTHRUS_MODELS or TEACHER_DECODERS or EXTERNAL_TRAJ
    outputs = study_outputs() if studied else corpus_shards() + decode_files()
    if config["benchmarks"]["enabled"]:
        outputs += [f"{R}/tables/benchmarks.csv"]
    if frontier_files():
        outputs += [f"{R}/tables/exactness_cost.csv"]
    return outputs


wildcard_constraints:
    # an engine's file is ingested (workflow/rules/external.smk), never decoded
    decoder="|".join(d for d in contracts.DECODERS if d != contracts.EXTERNAL_DECODER),
    precision="|".join(contracts.PRECISIONS),
    attention="|".join(contracts.ATTENTIONS),
    model=contracts.NAME,


PRECISIONS = config["decode"]["precisions"]
ATTENTIONS = config["decode"]["attentions"]
TRAINED = list(config["models"])
EXTERNAL = config["external_models"]
ORTHRUS_MODELS = TRAINED + list(EXTERNAL)
# decoders that run on an Orthrus model: its Orthrus loop and (decode.own_ar_view) its own AR view
MODEL_DECODERS = (["orthrus"] + (["ar"] if config["decode"]["own_ar_view"] else [])
                  + (["orthrus-lossy"] if "orthrus-lossy" in CONTROLS else []))
# the decoders whose grid a narrowed Orthrus model (decode.grids) sets, unless narrowed themselves
MODEL_LOOPS = ("orthrus", "ar", "orthrus-lossy")
# decode.grids: a narrower (precision, attention) grid for some of transformers' speculative decoders
# (a key of decode.decoders), or for an Orthrus model's loop and AR view (a key of models or
# external_models); config_check.py rejects any other key. The ar-ref reference keeps the full grid.
_GRIDS = config["decode"]["grids"]
GRIDS = {d: g for d, g in _GRIDS.items() if d in TEACHER_DECODERS + CONTROLS and d not in ORTHRUS_MODELS}
MODEL_GRIDS = {m: g for m, g in _GRIDS.items() if m in ORTHRUS_MODELS}


def _grid(grid):
    """(precisions, attentions) of a decode.grids entry, a key left out keeping the full list."""
    return grid.get("precisions", PRECISIONS), grid.get("attentions", ATTENTIONS)


def cells(decoder, model=None):
    """The (precision, attention) pairs `decoder` runs over (on `model`, for an Orthrus model's
    decoders), in the grid's order: a narrowed decoder's or control's grid, a narrowed model's
    grid for its Orthrus loop, AR view and lossy control, otherwise the full decode grid."""
    if decoder in GRIDS:
        grid = GRIDS[decoder]
    elif decoder in MODEL_LOOPS and model in MODEL_GRIDS:
        grid = MODEL_GRIDS[model]
    else:
        grid = {}
    precisions, attentions = _grid(grid)
    return [(p, a) for p in precisions for a in attentions]


def cell_prompts(decoder, model=None, precision=None):
    """`--prompts-per-domain` for `decoder`'s cells (on `model`, at `precision`), from the same
    decode.grids entry as `cells`: a number for every precision, or one per precision (a
    precision left out of the mapping, and no entry at all: every prompt)."""
    grid = GRIDS.get(decoder) or (MODEL_GRIDS.get(model, {}) if decoder in MODEL_LOOPS else {})
    n = grid.get("prompts_per_domain")
    if isinstance(n, dict):
        n = n.get(precision)
    return ["--prompts-per-domain", n] if n else []


def _rule_name(base, used):
    """`base` made a valid identifier for a rule, not one in `used` (a suffix makes it unique)."""
    name = re.sub(r"\W", "_", base)
    unique, i = name, 1
    while unique in used:
        i += 1
        unique = f"{name}_{i}"
    used.add(unique)
    return unique


TABLE_FILES = list(contracts.TABLES)
BENCHMARK_TABLE_FILES = list(contracts.BENCHMARK_TABLES)
CLAIMS_FILES = list(contracts.CLAIMS_TABLES)
FIGURES = list(contracts.FIGURES)


def model_path(name):
    """Trained variants live under results/models; external checkpoints are paths or hub ids."""
    return pinned(EXTERNAL[name]) if name in EXTERNAL else f"{R}/models/{name}"


# decoders that run the teacher through transformers' generate()
HF_DECODERS = ["ar-ref"] + TEACHER_DECODERS


def orthrus_input(wildcards):
    """A trained variant's directory, or an external checkpoint's local files."""
    return model_files(EXTERNAL[wildcards.model]) if wildcards.model in EXTERNAL else model_path(wildcards.model)


def model_input(wildcards):
    return teacher_input() if wildcards.decoder in HF_DECODERS else orthrus_input(wildcards)


def decode_weights(wildcards):
    """weights_fingerprint of a decoding job's model (and the assisted decoder's draft)."""
    drafts = [draft_path()] if wildcards.decoder == "assisted" else []
    return weights_fingerprint(model_arg(wildcards), *drafts)


def model_arg(wildcards):
    return teacher_path() if wildcards.decoder in HF_DECODERS else model_path(wildcards.model)


def decode_files():
    """Every decoding result of the study: the reference and transformers' speculative decoders on
    the teacher, each model's Orthrus loop and AR view."""
    files = [f"{R}/decode/{TEACHER}/{d}-{p}-{a}.parquet" for d in HF_DECODERS for p, a in cells(d)]
    files += [f"{R}/decode/{m}/{d}-{p}-{a}.parquet" for m in ORTHRUS_MODELS for d in MODEL_DECODERS
              for p, a in cells(d, m)]
    return files + [external_file(n) for n in EXTERNAL_TRAJ]


TPF = config["tpf"]
# the verdicts' bound per precision, as the forensics and analyze commands take it
ROUNDING_ULPS = ",".join(f"{p}={v:g}" for p, v in config["analysis"]["rounding_ulps"].items())
FRONTIER = config["frontier"]


def frontier_files():
    """The price-of-exactness measurement (frontier.enabled): its model, or the first Orthrus model."""
    if not FRONTIER["enabled"] or not ORTHRUS_MODELS:
        return []
    return [f"{R}/frontier/{FRONTIER['model'] or ORTHRUS_MODELS[0]}.parquet"]


def tpf_files():
    """The separate Table 2 run (tpf.enabled): every Orthrus model at the TPF settings."""
    if not TPF["enabled"]:
        return []
    return expand(f"{R}/tpf/{{m}}/orthrus-{{p}}-{{a}}.parquet", m=ORTHRUS_MODELS, p=TPF["precisions"],
                  a=TPF["attentions"])


def forensics_files():
    """One file per Orthrus model, one for the teacher's speculative decoders, one per engine's file."""
    return (expand(f"{R}/forensics/{{m}}.parquet", m=ORTHRUS_MODELS + ([TEACHER] if TEACHER_DECODERS else []))
            + [f"{R}/forensics/external/{n}.parquet" for n in EXTERNAL_TRAJ])


# decode.external: engines' trajectory files, each the decoder `external` under its own name
# (workflow/rules/external.smk). Its cell is the entry's precision and attention, else its file's
# env (read now, while the workflow is parsed: orthrus.engines.ingest.cell), inside the decode grid.
EXTERNAL_TRAJ = config["decode"]["external"] | engine_entries(config, R)  # decode.engines: workflow/rules/engines.smk


def _external_cells():
    out = {}
    for name, entry in EXTERNAL_TRAJ.items():
        try:
            p, a = external_cell(name, entry)
        except InputError as e:
            raise ConfigError([str(e)]) from None
        for key, value, grid in (("precision", p, PRECISIONS), ("attention", a, ATTENTIONS)):
            if value not in grid:
                raise ConfigError([f"decode.external.{name}.{key}: {value!r} (from {entry['path']}) not in the decode "
                                   f"grid {grid} (the ar-ref reference runs only there): set it, or add it there"])
        out[name] = (p, a)
    return out


EXTERNAL_CELLS = _external_cells()


def external_file(name):
    """The decoding result `orthrus ingest` writes for the decode.external entry `name`."""
    p, a = EXTERNAL_CELLS[name]
    return f"{R}/decode/{name}/external-{p}-{a}.parquet"


def external_reference_file(name):
    """What the entry `name` is compared with: the engine's own plain run it declares, else the ar-ref of its cell."""
    ref = EXTERNAL_TRAJ[name].get("reference")
    if ref:
        return external_file(ref)
    p, a = EXTERNAL_CELLS[name]
    return f"{R}/decode/{TEACHER}/ar-ref-{p}-{a}.parquet"


def ppl_external_files():
    """The engines' plain runs that engine pairs declare as their reference: the teacher scores their responses."""
    return [external_file(r) for r in sorted({e["reference"] for e in EXTERNAL_TRAJ.values() if e.get("reference")})]


def _explained(model):
    """The decoders whose divergences a forensics job on `model` explains."""
    return TEACHER_DECODERS if model == TEACHER else [d for d in MODEL_DECODERS if d != "ar"]


def forensics_decoded(wildcards):
    """The decoding results a forensics job explains, in (precision, attention) order."""
    decoders = _explained(wildcards.model)
    return [f"{R}/decode/{wildcards.model}/{d}-{p}-{a}.parquet" for d in decoders for p, a in cells(d, wildcards.model)]


def forensics_reference(wildcards):
    """The reference file paired with each of forensics_decoded's."""
    decoders = _explained(wildcards.model)
    return [f"{R}/decode/{TEACHER}/ar-ref-{p}-{a}.parquet" for d in decoders for p, a in cells(d, wildcards.model)]


def study_outputs():
    return (expand(f"{R}/tables/{{t}}", t=TABLE_FILES + CLAIMS_FILES)
            + expand(f"{R}/figures/{{f}}.{{e}}", f=FIGURES, e=contracts.FIGURE_FORMATS))


BENCH = config["benchmarks"]


# Tasks that run model-written code are left out unless benchmarks.allow_code_eval opts in: the
# others (GSM8K, IFEval) still run under the safe default, and the skip is said once, here.
CODE_TASKS_LEFT_OUT = [] if BENCH["allow_code_eval"] or BENCH["tiny_tasks"] else [
    t for t in BENCH["tasks"] if contracts.runs_model_code(t)]
if CODE_TASKS_LEFT_OUT and BENCH["enabled"]:
    print(f"benchmarks: {', '.join(CODE_TASKS_LEFT_OUT)} left out: it runs model-written code; set "
          "benchmarks.allow_code_eval: true (and HF_ALLOW_CODE_EVAL=1 in the jobs' environment) to run it",
          file=sys.stderr)


def bench_tasks():
    if BENCH["tiny_tasks"] is True:
        return "tiny_arith,tiny_gec,tiny_qa,tiny_code,tiny_translate"
    if BENCH["tiny_tasks"]:
        return ",".join(BENCH["tiny_tasks"])
    return ",".join(t for t in BENCH["tasks"] if t not in CODE_TASKS_LEFT_OUT)


def bench_docs():
    """prepare-data's --n: one count, or TASK=N for each task (benchmarks.n_docs)."""
    n = BENCH["n_docs"]
    return ",".join(f"{t}={c}" for t, c in n.items()) if isinstance(n, dict) else n


def bench_files():
    """The teacher through its AR view, every Orthrus model through its consensus loop."""
    # the teacher through our AR loop, or (ar_baseline: hf) through lm-eval's own HF generate
    baseline = "ar-ref" if BENCH["ar_baseline"] == "hf" else "ar"
    runs = [(TEACHER, baseline)] + [(m, "orthrus") for m in ORTHRUS_MODELS]
    return [f"{R}/benchmarks/{m}/{d}-{p}-{BENCH['attention']}.json" for m, d in runs for p in BENCH["precisions"]]


def bench_model_input(wildcards):
    return teacher_input() if wildcards.model == TEACHER else orthrus_input(wildcards)


def bench_model_arg(wildcards):
    return teacher_path() if wildcards.model == TEACHER else model_path(wildcards.model)
