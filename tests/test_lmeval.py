"""lm-evaluation-harness: the registered `orthrus` model, tiny-world tasks, guard, tables."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import tiny_base

from orthrus.errors import InputError

torch.set_num_threads(1)

lmeval = pytest.importorskip("orthrus.lmeval")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A saved tiny Orthrus with the world tokenizer (diffusion view = AR view + noise, so drafts
    get accepted) and a directory of tiny tasks."""
    from orthrus import OrthrusForCausalLM
    from orthrus.world.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("lmeval")
    tok = train_tokenizer(vocab_size=320, n_per_domain=40)
    vocab = len(tok)
    base = tiny_base(0, vocab=vocab + 1, positions=512)
    with torch.no_grad():  # as conftest's `peaked`: predictions depend less on the input token
        shared = torch.randn(base.config.hidden_size, generator=torch.Generator().manual_seed(7))
        base.model.embed_tokens.weight.add_(3.0 * 0.2 * shared)
    base.config.eos_token_id = base.generation_config.eos_token_id = tok.eos_token_id
    model = OrthrusForCausalLM.from_base(base, block_size=4, mask_token_id=vocab)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.diffusion_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 1e-3)
    model.tokenizer = tok
    model.save_pretrained(root / "model")
    assert lmeval.main(["prepare-data", "--out", str(root / "data"), "--n", "5", "--seed", "3"]) == 0
    return {"root": root, "model": root / "model", "data": root / "data", "tok": tok}


def test_prepare_data_docs_and_yaml(world, tmp_path):
    import pandas as pd

    from orthrus.world import tiny_tasks as bm
    from orthrus.world.domains import QA_VALS

    data = world["data"]
    manifest = json.loads((data / "manifest.json").read_text())
    assert set(manifest["tasks"]) == {"tiny_arith", "tiny_gec", "tiny_qa", "tiny_code", "tiny_translate"}
    assert manifest["tasks"]["tiny_code"]["primary_metrics"] == ["exact_match,none"]
    code = [json.loads(line) for line in (data / "tiny_code.jsonl").read_text().splitlines()]
    for d in code:
        name = d["question"].removeprefix("Napishi funkciju ").split("(")[0]
        assert d["target"] == d["answer"] and d["target"].startswith(f"def {name}(")
        compile(d["target"], "<tiny_code>", "exec")
    trans = [json.loads(line) for line in (data / "tiny_translate.jsonl").read_text().splitlines()]
    assert len(trans) == 5 and all(
        d["question"].startswith("Translate from Ruvian to English: ") and d["target"].startswith("The ") for d in trans
    )
    arith = [json.loads(line) for line in (data / "tiny_arith.jsonl").read_text().splitlines()]
    assert len(arith) == 5 and len({d["question"] for d in arith}) == 5
    for d in arith:
        expr = d["question"].removeprefix("Compute ").removesuffix(". Show the steps.")
        assert d["target"] == str(eval(expr)) and d["answer"].endswith(f"The answer is {d['target']}.")
    qa = [json.loads(line) for line in (data / "tiny_qa.jsonl").read_text().splitlines()]
    for d in qa:
        assert d["choices"] == QA_VALS and f"{d['name']} {d['choices'][d['gold']]} " in d["question"]
    # deterministic, and prompts listed in --exclude are skipped
    assert bm.make_docs("tiny_arith", 5, seed=3) == arith
    excl = tmp_path / "eval.parquet"
    pd.DataFrame({"prompt_id": ["e0"], "domain": ["math"], "prompt": [arith[0]["question"]]}).to_parquet(excl)
    assert (
        lmeval.main(
            [
                "prepare-data",
                "--out",
                str(tmp_path / "d"),
                "--n",
                "5",
                "--seed",
                "3",
                "--tasks",
                "tiny_arith",
                "--exclude",
                str(excl),
            ]
        )
        == 0
    )
    again = [json.loads(line) for line in (tmp_path / "d" / "tiny_arith.jsonl").read_text().splitlines()]
    assert arith[0]["question"] not in {d["question"] for d in again} and len(again) == 5
    # a count per task (benchmarks.n_docs as a mapping): each task its own, every task named
    assert (
        lmeval.main(
            [
                "prepare-data",
                "--out",
                str(tmp_path / "n"),
                "--n",
                "tiny_arith=7,tiny_qa=3",
                "--seed",
                "3",
                "--tasks",
                "tiny_arith,tiny_qa",
            ]
        )
        == 0
    )
    manifest = json.loads((tmp_path / "n" / "manifest.json").read_text())
    assert {t: c["n"] for t, c in manifest["tasks"].items()} == manifest["n"] == {"tiny_arith": 7, "tiny_qa": 3}
    assert [json.loads(x) for x in (tmp_path / "n" / "tiny_arith.jsonl").read_text().splitlines()][:5] == arith
    for bad, says in (
        ("tiny_arith=7", "missing tiny_qa"),
        ("tiny_arith=7,tiny_qa=3,tiny_gec=2", "not prepared: tiny_gec"),
        ("tiny_arith=x,tiny_qa=3", "count of tiny_arith"),
        ("0", "positive"),
    ):
        with pytest.raises(InputError, match=says):
            lmeval.main(["prepare-data", "--out", str(tmp_path / "bad"), "--n", bad, "--tasks", "tiny_arith,tiny_qa"])
        assert not (tmp_path / "bad").exists()
    # the packaged templates are not tasks by themselves; the generated YAMLs are
    tm = lmeval.task_manager([data, bm.TEMPLATES_DIR], ["tiny_arith"])
    assert {"tiny_arith", "tiny_gec", "tiny_qa", "tiny_code", "tiny_translate"} <= set(tm.all_tasks)
    assert str(data) in str(tm.task_index["tiny_arith"].yaml_path)


def test_tiny_code_whitespace_normalisation():
    """tiny_code's exact match ignores surrounding whitespace, trailing spaces and blank lines,
    not indentation or spaces inside a line."""
    import yaml
    from lm_eval.api.metrics import exact_match_hf_evaluate

    from orthrus.world import tiny_tasks as bm

    (metric,) = yaml.safe_load(bm.template_path("tiny_code").read_text())["metric_list"]
    ref = "def sum_xs(seq):\n    total = 0\n    for v in seq:\n        total += v\n    return total"

    def em(pred):
        return exact_match_hf_evaluate([pred], [ref], regexes_to_ignore=metric["regexes_to_ignore"])["exact_match"]

    assert em(ref) == em("\n " + ref.replace("total = 0", "total = 0  \n\n\t").replace("seq:", "seq:\t") + "\n\n") == 1
    assert em(ref.replace("        total += v", "    total += v")) == 0  # indentation counts
    assert em(ref.replace("total = 0", "total=0")) == 0


def test_registered_and_chat_rendering_matches_render_chat(world):
    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_model

    from orthrus.chat import render_chat

    assert get_model("orthrus") is lmeval.OrthrusLM
    lm = lmeval.OrthrusLM(pretrained=str(world["model"]), decoding="orthrus", dtype="fp32", device="cpu")
    tok = lm.tokenizer
    prompt = "Compute 1 + 2 + 3. Show the steps."
    text = lm.apply_chat_template([{"role": "user", "content": prompt}])
    assert lm._encode_context(text) == render_chat(tok, prompt)
    with_prefix = lm.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": "Step 1:"}], add_generation_prompt=False
    )
    assert with_prefix == tok.decode(render_chat(tok, prompt)) + "Step 1:"

    # until stop strings cut the text; max_gen_toks caps the tokens
    def req(gen):
        return Instance("generate_until", {}, (text, gen), 0)

    full = lm.generate_until([req({"until": [], "max_gen_toks": 12})])[0]
    assert lm.generation_log[-1]["n_tokens"] <= 12 and full
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    cut = lm.generate_until([req({"until": [stop], "max_gen_toks": 12})])[0]
    assert cut == full.split(stop)[0]


def test_simple_evaluate_ar_and_orthrus_identical_in_fp32(world):
    from lm_eval.evaluator import simple_evaluate

    tasks = ["tiny_arith", "tiny_gec", "tiny_qa"]
    tm = lmeval.task_manager([world["data"]], tasks)
    ar = simple_evaluate(
        model="orthrus",
        tasks=tasks,
        task_manager=tm,
        limit=3,
        num_fewshot=0,
        model_args={"pretrained": str(world["model"]), "decoding": "ar", "dtype": "fp32", "device": "cpu"},
        apply_chat_template=True,
        gen_kwargs={"max_gen_toks": 12},
        log_samples=True,
        bootstrap_iters=0,
    )
    rec = lmeval.evaluate(
        world["model"],
        decoding="orthrus",
        precision="fp32",
        tasks=tasks,
        include_paths=[world["data"]],
        limit=3,
        max_gen_toks=12,
        device="cpu",
        bootstrap_iters=0,
    )
    gens = rec["generations"]
    assert len(gens) == 6 and sum(sum(g["accepted"]) for g in gens) > 0  # the drafts did get used
    assert rec["env"]["dtype"] == "fp32" and rec["settings"]["chat_template"]
    for task in tasks:
        a = {k: v for k, v in ar["results"][task].items() if "," in k}
        b = {k: v for k, v in rec["results"][task].items() if "," in k}
        assert a == pytest.approx(b, nan_ok=True)
        sa = sorted(ar["samples"][task], key=lambda s: (s["doc_id"], s["filter"]))
        sb = sorted(rec["samples"][task], key=lambda s: (s["doc_id"], s["filter"]))
        assert len(sa) == len(sb) > 0
        for x, y in zip(sa, sb):
            assert json.loads(json.dumps(x["resps"])) == y["resps"]
            assert json.loads(json.dumps(x["filtered_resps"])) == y["filtered_resps"]
    # the arithmetic prompt went through the study's chat rendering
    assert rec["samples"]["tiny_arith"][0]["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_no_chat_template_tasks(world):
    rec = lmeval.evaluate(
        world["model"],
        decoding="ar",
        tasks=["tiny_arith", "tiny_gec"],
        include_paths=[world["data"]],
        limit=1,
        max_gen_toks=4,
        device="cpu",
        bootstrap_iters=0,
        raw_tasks=["tiny_gec"],
    )
    assert rec["samples"]["tiny_arith"][0]["prompt"].startswith("<|im_start|>system\n<|im_end|>")
    assert rec["samples"]["tiny_gec"][0]["prompt"].startswith("Correct the grammar:")
    assert set(rec["results"]) == {"tiny_arith", "tiny_gec"} and rec["settings"]["no_chat_template_tasks"] == [
        "tiny_gec"
    ]


def test_code_eval_guard(world, monkeypatch):
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    with pytest.raises(lmeval.BenchmarkError, match="--allow-code-eval.*HF_ALLOW_CODE_EVAL=1"):
        lmeval.evaluate(world["model"], tasks=["humaneval"])
    with pytest.raises(lmeval.BenchmarkError, match="Missing: HF_ALLOW_CODE_EVAL=1"):
        lmeval.check_code_eval(["humaneval"], allow=True)
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    with pytest.raises(lmeval.BenchmarkError, match="Missing: --allow-code-eval"):
        lmeval.check_code_eval(["humaneval"], allow=False)
    lmeval.check_code_eval(["humaneval"], allow=True)
    # any task that declares `unsafe_code: true` counts, whatever its name
    (world["root"] / "unsafe").mkdir(exist_ok=True)
    (world["root"] / "unsafe" / "t.yaml").write_text(
        "task: my_exec\nunsafe_code: true\ndataset_path: json\noutput_type: generate_until\n"
    )
    tm = lmeval.task_manager([world["root"] / "unsafe", world["data"]], ["my_exec", "tiny_gec"])
    assert lmeval.unsafe_tasks(tm, ["my_exec", "tiny_gec"]) == ["my_exec"]
    assert lmeval.unsafe_tasks(None, ["humaneval_instruct", "gsm8k"]) == ["humaneval_instruct"]
    from orthrus.cli import main as orthrus_cli

    assert (
        orthrus_cli(
            [
                "lm-eval",
                "run",
                "--model-path",
                str(world["model"]),
                "--tasks",
                "humaneval",
                "--out",
                str(world["root"] / "x.json"),
            ]
        )
        == 2
    )  # one line, exit 2: a user error
    assert not (world["root"] / "x.json").exists()


def _record(model, decoder, precision, answers, scores, stderr):
    n = len(answers)
    samples = [
        {
            "doc_id": i,
            "filter": "flexible-extract",
            "resps": [[f"... {a}"]],
            "filtered_resps": [a],
            "metrics": {"exact_match": s},
        }
        for i, (a, s) in enumerate(zip(answers, scores))
    ]
    samples += [
        {
            "doc_id": i,
            "filter": "strict-match",
            "resps": [[f"... {a}"]],
            "filtered_resps": ["[invalid]"],
            "metrics": {"exact_match": 0.0},
        }
        for i, a in enumerate(answers)
    ]
    value = sum(scores) / n
    return {
        "model": model,
        "decoder": decoder,
        "precision": precision,
        "attention": "eager",
        "results": {
            "tiny_arith": {
                "alias": "tiny_arith",
                "exact_match,flexible-extract": value,
                "exact_match_stderr,flexible-extract": stderr,
                "exact_match,strict-match": 0.0,
                "exact_match_stderr,strict-match": 0.0,
            }
        },
        "n_samples": {"tiny_arith": {"original": n, "effective": n}},
        "samples": {"tiny_arith": samples},
    }


def _with_qa(rec, lls, golds):
    """Add a multiple-choice (log-likelihood) task: `resps` are [[ll, is_greedy]] per choice."""
    samples = [
        {
            "doc_id": i,
            "filter": "none",
            "resps": [[[x, False]] for x in ll],
            "filtered_resps": [[x, False] for x in ll],
            "metrics": {"acc": float(max(range(len(ll)), key=ll.__getitem__) == g)},
        }
        for i, (ll, g) in enumerate(zip(lls, golds))
    ]
    value = sum(s["metrics"]["acc"] for s in samples) / len(samples)
    rec["results"]["tiny_qa"] = {"alias": "tiny_qa", "acc,none": value, "acc_stderr,none": 0.2}
    rec["n_samples"]["tiny_qa"] = {"original": len(samples), "effective": len(samples)}
    rec["samples"]["tiny_qa"] = samples
    return rec


def test_tables_and_figure(tmp_path):
    golds = [0, 1, 2]
    lls = [[-0.5, -2.0, -3.0], [-1.0, -0.7, -2.0], [-1.0, -0.1, -2.0]]
    noisy = [[x + 1e-6 for x in ll] for ll in lls]  # another run's last bits: the same choices
    recs = [
        _record("m", "ar", "bf16", ["1", "2", "3", "4"], [1, 1, 0, 0], 0.29),
        _record("m", "orthrus", "bf16", ["1", "2", "9", "5"], [1, 1, 0, 1], 0.25),
        _with_qa(_record("teacher", "ar", "fp32", ["1", "2", "3", "4"], [1, 1, 0, 0], 0.29), lls, golds),
        _with_qa(_record("m", "orthrus", "fp32", ["1", "2", "3", "4"], [1, 1, 0, 0], 0.29), noisy, golds),
    ]
    paths = []
    for r in recs:
        paths.append(tmp_path / f"{r['model']}-{r['decoder']}-{r['precision']}.json")
        paths[-1].write_text(json.dumps(r))
    out = tmp_path / "tables" / "benchmarks.csv"
    fig = tmp_path / "figures" / "benchmarks"
    assert lmeval.main(["table", "--inputs", *map(str, paths), "--out", str(out), "--figure", str(fig)]) == 0

    import pandas as pd

    df = pd.read_csv(out)
    assert list(df.columns[:8]) == ["model", "decoder", "precision", "attention", "task", "metric", "value", "stderr"]
    assert len(df) == 10 and df["primary"].sum() == 6
    assert out.with_suffix(".md").exists() and (fig.with_suffix(".png")).exists() and fig.with_suffix(".pdf").exists()
    ag = pd.read_csv(tmp_path / "tables" / "benchmarks_agreement.csv")
    row = ag[(ag.precision == "bf16") & (ag.metric == "exact_match,flexible-extract")].iloc[0]
    assert row.reference_model == "m" and row.n == 4
    assert row.n_answers_differ == 2 and row.n_responses_differ == 2
    assert row.score_diff == pytest.approx(0.25)
    # per document, on the same 4 documents: differences 0, 0, 0, 1 (the claims' TOST reads these)
    assert row.paired_diff == pytest.approx(0.25) and row.paired_stderr == pytest.approx(0.25)
    assert row.combined_stderr == pytest.approx(math.hypot(0.25, 0.29)) and bool(row.within_stderr)
    # fp32: no AR run of "m" itself, so the one AR model at that precision (the teacher) is the reference
    row = ag[(ag.precision == "fp32") & (ag.metric == "exact_match,flexible-extract")].iloc[0]
    assert row.reference_model == "teacher" and row.n_answers_differ == 0 and row.score_diff == 0
    assert row.n_responses_differ == 0
    # a log-likelihood task generates nothing: no responses to compare (NaN), only the chosen answers
    row = ag[(ag.precision == "fp32") & (ag.task == "tiny_qa")].iloc[0]
    assert row.n == 3 and math.isnan(row.n_responses_differ) and row.n_answers_differ == 0
    assert row.value == row.reference_value == pytest.approx(2 / 3)
    # no inputs: empty tables and an annotated empty figure, not a crash
    assert lmeval.main(["table", "--out", str(tmp_path / "empty" / "b.csv")]) == 0
    assert (tmp_path / "empty" / "b.png").exists()
    # two inputs for the same run are an error
    with pytest.raises(lmeval.BenchmarkError, match="several inputs"):
        lmeval.main(["table", "--inputs", str(paths[0]), str(paths[0]), "--out", str(tmp_path / "dup.csv")])


def test_authors_settings_hf_generate_baseline_task_lengths_no_chat_template(world):
    """The authors' Table 7 settings: no chat template, each task's own max_gen_toks, the AR
    baseline through lm-eval's own HFLM generation (ar-ref); greedy fp32 ar-ref == our AR loop."""
    kw = dict(
        tasks=["tiny_arith"],
        include_paths=[world["data"]],
        limit=2,
        max_gen_toks=None,
        chat_template=False,
        device="cpu",
        bootstrap_iters=0,
    )
    ref = lmeval.evaluate(world["model"], decoding="ar-ref", **kw)
    ours = lmeval.evaluate(world["model"], decoding="ar", **kw)
    assert ref["settings"]["max_gen_toks"] is None and not ref["settings"]["chat_template"]
    assert ref["generations"] == [] and len(ours["generations"]) == 2  # ar-ref never entered our loop
    assert not ref["samples"]["tiny_arith"][0]["prompt"].startswith("<|im_start|>")
    for x, y in zip(ref["samples"]["tiny_arith"], ours["samples"]["tiny_arith"]):
        assert x["resps"] == y["resps"]
    from orthrus.lmeval.cli import _gen_cap

    assert _gen_cap("task") is None and _gen_cap("64") == 64


def test_tiny_translate_scored_by_chrf_as_lm_eval_scores_wmt(world):
    """Translation gets partial credit (lm-eval's corpus chrF, as its WMT tasks), so a teacher that
    gets some words right scores strictly between 0 and 100 where exact match says 0."""
    import yaml
    from lm_eval.api.metrics import chrf

    from orthrus.lmeval.tables import result_rows
    from orthrus.world import tiny_tasks

    metrics = [
        m["metric"] for m in yaml.safe_load(tiny_tasks.template_path("tiny_translate").read_text())["metric_list"]
    ]
    assert metrics == ["chrf", "exact_match"]
    ref = "The quiet miller finds the fox. The young cat likes the boy."
    assert chrf([(ref, ref)]) == pytest.approx(100)
    assert 0 < chrf([(ref, "The green boy finds the fox. The young cat likes the queen.")]) < 100
    rec = lmeval.evaluate(
        world["model"],
        decoding="ar",
        tasks=["tiny_translate"],
        include_paths=[world["data"]],
        limit=2,
        max_gen_toks=8,
        device="cpu",
        bootstrap_iters=10,
    )
    rows = {r["metric"]: r for r in result_rows({**rec, "model": "m"})}
    assert rows["chrf,none"]["primary"] and not rows["exact_match,none"]["primary"]
    assert 0 <= rows["chrf,none"]["value"] <= 100


@pytest.mark.parametrize("eos", ["generation_config", "config"])
def test_lmeval_runs_the_decode_stages_loop_with_its_options(eos, tmp_path):
    """One prompt, the paper's loop options (shorten, all, determinism off) and each eos policy:
    the lm-eval model emits the decode stage's tokens. The model's generation config lists a
    second EOS id that the trajectory reaches: `generation_config` stops there, `config` (the
    released loop) decodes past it, and the answer text then holds the text after that id too
    (special tokens are skipped when decoding; a task's stop strings still cut it)."""
    import pandas as pd
    from helpers import EOS, tiny_orthrus, word_tokenizer
    from lm_eval.api.instance import Instance

    from orthrus.decode.loop import generate
    from orthrus.decode.stage import decode_prompts
    from orthrus.options import DecodeOptions

    fast = word_tokenizer()
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    prompt = "w9 w9"
    options = DecodeOptions(
        decoder="orthrus",
        precision="fp32",
        max_new_tokens=30,
        eos=eos,
        last_block="shorten",
        prefill_logits="all",
        deterministic=False,
    )
    ids = torch.tensor(
        fast(
            fast.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )["input_ids"]
    )
    free = generate(model, ids, options, eos_token_id=[]).tokens.tolist()
    second = next(t for t in free[3:] if t != EOS)
    model.config.eos_token_id = EOS
    model.generation_config.eos_token_id = [EOS, second]
    model.save_pretrained(tmp_path / "m")
    fast.save_pretrained(tmp_path / "m")

    prompts = pd.DataFrame({"prompt_id": ["a"], "domain": ["x"], "prompt": [prompt]})
    row = decode_prompts(model, fast, prompts, options, "m", progress=False).iloc[0]
    lm = lmeval.OrthrusLM(pretrained=str(tmp_path / "m"), options=options.to_json(), device="cpu")
    context = lm.apply_chat_template([{"role": "user", "content": prompt}])
    text = lm.generate_until([Instance("generate_until", {}, (context, {"until": [], "max_gen_toks": 30}), 0)])[0]
    tokens = lm.generation_log[-1]["tokens"]
    assert tokens == list(row.tokens) and lm.get_model_info()["options"] == options.record()
    if eos == "generation_config":
        assert tokens == free[: free.index(second) + 1]
    else:
        assert second in tokens[:-1] and len(tokens) > free.index(second) + 1
        assert fast.decode(tokens[free.index(second) + 1 :], skip_special_tokens=True) in text


def test_stop_strings_end_decoding_with_the_same_tokens_up_to_the_stop(world):
    """A stop string ends the loop as soon as the text holds it (fewer tokens, fewer forwards),
    and the tokens emitted up to there are those of the full-length run."""
    from lm_eval.api.instance import Instance

    lm = lmeval.OrthrusLM(pretrained=str(world["model"]), decoding="orthrus", dtype="fp32", device="cpu")
    text = lm.apply_chat_template([{"role": "user", "content": "Compute 1 + 2 + 3. Show the steps."}])
    full = lm.generate_until([Instance("generate_until", {}, (text, {"until": [], "max_gen_toks": 40}), 0)])[0]
    full_log = lm.generation_log[-1]
    stop = full[len(full) // 3 : len(full) // 3 + 3]
    cut = lm.generate_until([Instance("generate_until", {}, (text, {"until": [stop], "max_gen_toks": 40}), 0)])[0]
    cut_log = lm.generation_log[-1]
    assert cut == full.split(stop)[0]
    assert cut_log["n_tokens"] < full_log["n_tokens"] and cut_log["tokens"] == full_log["tokens"][: cut_log["n_tokens"]]
    assert stop in lm.tok_decode(cut_log["tokens"])  # it stopped at the step that completed the stop string
