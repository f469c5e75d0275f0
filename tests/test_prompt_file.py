"""The evaluation prompt file in the authors' format ({domain: [prompt, ...]})."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from orthrus import chat
from orthrus.data import prompt_set, prompts
from orthrus.data.prompt_file import PromptFileError, load_eval_file

# The authors' file, kept outside the repository (shared/data/zarya-orthrus/README.md).
AUTHORS = Path(__file__).resolve().parents[2] / "shared" / "data" / "zarya-orthrus" / "speed_evaluation_dataset.json"
AUTHORS_SHA256 = "3fc47d9519770fa8c5ef37e0d5cb77719c5189a3ba97f923a432914990ee1bee"

FIXTURE = {
    "wmt ru-en": ["Переведи: кот", "Translate:\n  line two"],
    "math": ["What is 2+2? $x^2$", "Solve\tthis"],
    "gec-en": ["Fix: he go", "Fix: she go", "Fix: he go"],
}


def _write(tmp_path, obj, name="p.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return p


def test_exact_prompts_in_order_with_ids(tmp_path):
    src = _write(tmp_path, FIXTURE)
    df, log = load_eval_file(str(src), duplicates="first")
    assert list(df["prompt_id"]) == ["wmt ru-en-0", "wmt ru-en-1", "math-0", "math-1", "gec-en-0", "gec-en-1"]
    assert list(df["prompt"]) == FIXTURE["wmt ru-en"] + FIXTURE["math"] + FIXTURE["gec-en"][:2]
    assert log["eval"]["gec-en"] == {"kept": 2, "duplicate": 1}
    assert log["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def test_url_and_hash(tmp_path):
    src = _write(tmp_path, {"a": ["x"]})
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    df, _ = load_eval_file(src.as_uri(), sha256=digest)  # file:// goes through urllib
    assert list(df["prompt"]) == ["x"]
    with pytest.raises(PromptFileError, match=rf"{src.name}.*sha256"):
        load_eval_file(str(src), sha256="0" * 64)


@pytest.mark.parametrize(
    "obj, problem",
    [
        (["a", "b"], "expected a non-empty JSON object"),
        ({}, "expected a non-empty JSON object"),
        ({"a": "text"}, "'a' is a str, not a list"),
        ({"a": []}, "'a' has no prompts"),
        ({"a": ["x", 3]}, r"'a'\[1\] is a int"),
        ({"a": ["x", "  "]}, r"'a'\[1\] is an empty prompt"),
        ({"a": ["x"], "b": ["y", "x"]}, "b-1 repeats a-0"),
    ],
)
def test_strict_validation_names_file_and_problem(tmp_path, obj, problem):
    src = _write(tmp_path, obj, "bad.json")
    with pytest.raises(PromptFileError, match="bad.json") as e:
        load_eval_file(str(src))
    assert re.search(problem, str(e.value)), str(e.value)


def test_not_json(tmp_path):
    src = tmp_path / "broken.json"
    src.write_text("{not json")
    with pytest.raises(PromptFileError, match="broken.json: not UTF-8 JSON"):
        load_eval_file(str(src))


@pytest.mark.skipif(not AUTHORS.exists(), reason="the authors' prompt file is not on this machine")
def test_authors_file_gives_the_papers_1190():
    with pytest.raises(PromptFileError, match="gec-en-.* repeats gec-en-"):
        load_eval_file(str(AUTHORS), AUTHORS_SHA256)
    df, log = load_eval_file(str(AUTHORS), AUTHORS_SHA256, duplicates="first")
    counts = df.groupby("domain").size()
    assert len(df) == 1190 and counts["gec-en"] == 90 and (counts.drop("gec-en") == 100).all()
    assert "wmt ru-en" in counts.index and df["prompt_id"].is_unique
    raw = json.loads(AUTHORS.read_text(encoding="utf-8"))
    assert df.set_index("prompt_id").loc["wmt ru-en-7", "prompt"] == raw["wmt ru-en"][7]  # byte for byte


def test_prompts_stage_uses_the_file_and_keeps_sets_disjoint(tmp_path):
    ev, di = tmp_path / "eval.parquet", tmp_path / "distill.parquet"
    # the file's "math" prompt is one the tiny source would also draw for distillation
    _, d0, _ = prompts.tiny_prompts(seed=0, eval_per_domain=1, distill_n=30)
    src = _write(tmp_path, {"wmt ru-en": ["a prompt with spaces"], "math": [d0["prompt"].iloc[0]]})
    cfg = json.dumps({"source": "tiny", "eval_per_domain": 1, "distill_n": 30, "eval_file": str(src)})
    assert prompts.main(["--config", cfg, "--eval-out", str(ev), "--distill-out", str(di)]) == 0
    e, d = pd.read_parquet(ev), pd.read_parquet(di)
    assert list(e["prompt_id"]) == ["wmt ru-en-0", "math-0"]
    assert not set(e["prompt"]) & set(d["prompt"]) and len(d) == 29


def test_message_formats():
    assert chat.chat_messages("hi", "none") == [{"role": "user", "content": "hi"}]
    assert chat.chat_messages("hi")[0] == {"role": "system", "content": ""}
    assert chat.chat_messages("hi", "system:Be brief.")[0] == {"role": "system", "content": "Be brief."}
    with pytest.raises(ValueError, match="message format"):
        chat.chat_messages("hi", "user")


def test_prompt_sets_from_the_file_pass_the_prompt_set_validator(tmp_path, capsys):
    """What `orthrus prompts` writes from an eval file is read back by every stage's validator
    (read_prompt_set); a bad file is one line from the CLI, naming it, and nothing is written."""
    from orthrus.cli import main

    ev, di = tmp_path / "eval.parquet", tmp_path / "distill.parquet"
    src = _write(tmp_path, FIXTURE)
    cfg = json.dumps(
        {"source": "tiny", "eval_per_domain": 1, "distill_n": 5, "eval_file": str(src), "eval_duplicates": "first"}
    )
    assert main(["prompts", "--config", cfg, "--eval-out", str(ev), "--distill-out", str(di)]) == 0
    assert list(prompt_set.read_prompt_set(ev)["prompt_id"]) == [
        "wmt ru-en-0",
        "wmt ru-en-1",
        "math-0",
        "math-1",
        "gec-en-0",
        "gec-en-1",
    ]
    prompt_set.read_prompt_set(di)
    capsys.readouterr()
    bad = _write(tmp_path, {"qa": ["fine", "  "]}, "bad.json")
    cfg = json.dumps({"source": "tiny", "eval_per_domain": 1, "distill_n": 5, "eval_file": str(bad)})
    out = tmp_path / "out"
    assert (
        main(
            ["prompts", "--config", cfg, "--eval-out", str(out / "e.parquet"), "--distill-out", str(out / "d.parquet")]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1] == f"orthrus prompts: prompt file {bad}: 'qa'[1] is an empty prompt", err
    assert not out.exists()


def test_an_empty_distillation_set_is_a_valid_prompt_set():
    """paper.yaml takes its corpus ready from the hub: `distill: []` gives an empty set, which
    the check before writing accepts (string columns, no rows)."""
    empty = prompt_set.check_prompt_set(pd.DataFrame(columns=["prompt_id", "domain", "prompt"]), "distill")
    assert empty.empty and list(empty.columns) == ["prompt_id", "domain", "prompt"]


def test_duplicate_keys_url_errors_and_endless_sources_are_one_line(tmp_path):
    dup = tmp_path / "dup.json"
    dup.write_text('{"math": ["a"], "qa": ["b"], "math": ["c"]}')
    with pytest.raises(PromptFileError, match="the key 'math' is given twice"):
        load_eval_file(str(dup))
    for url in ("http://127.0.0.1:9/none.json", "nosuchscheme://x/y.json"):
        with pytest.raises(PromptFileError, match="cannot fetch it") as err:
            load_eval_file(url)
        assert "\n" not in str(err.value)
    import os

    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(PromptFileError, match="not a regular file"):
        load_eval_file(str(tmp_path / "pipe.json"))
    for url in ((tmp_path / "pipe.json").as_uri(), "file:///dev/zero"):  # refused before a byte is read
        with pytest.raises(PromptFileError, match="not a regular file"):
            load_eval_file(url)
    from orthrus.data import prompt_file

    big = tmp_path / "big.json"
    big.write_bytes(b" " * 64)
    old = prompt_file.MAX_BYTES
    prompt_file.MAX_BYTES = 16
    try:
        with pytest.raises(PromptFileError, match="larger than"):
            load_eval_file(big.as_uri())
    finally:
        prompt_file.MAX_BYTES = old


def _server(handler):
    """A local TCP server on a free port whose one connection `handler(conn)` serves; its URL."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        with conn:
            handler(conn)
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/p.json"


def test_a_url_that_never_answers_times_out_in_one_line(tmp_path, capsys):
    """A server that accepts and sleeps: `prompts.eval_file_timeout` seconds, then one line naming the URL."""
    import time

    from orthrus.cli import main

    url = _server(lambda conn: time.sleep(5))
    start = time.monotonic()
    cfg = json.dumps(
        {"source": "tiny", "eval_per_domain": 1, "distill_n": 5, "eval_file": url, "eval_file_timeout": 0.5}
    )
    assert (
        main(
            [
                "prompts",
                "--config",
                cfg,
                "--eval-out",
                str(tmp_path / "e.parquet"),
                "--distill-out",
                str(tmp_path / "d.parquet"),
            ]
        )
        == 2
    )
    assert time.monotonic() - start < 4
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"orthrus prompts: prompt file {url}: cannot fetch it (") and "timed out" in err, err


def test_a_url_that_trickles_stops_at_the_deadline():
    """Each byte within the socket timeout, the whole beyond it: the deadline bounds the download."""
    import time

    def trickle(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        try:
            for _ in range(40):
                conn.sendall(b" ")
                time.sleep(0.1)
        except OSError:
            pass

    url = _server(trickle)
    start = time.monotonic()
    with pytest.raises(PromptFileError, match="timed out"):
        load_eval_file(url, timeout=1.0)
    assert time.monotonic() - start < 3
