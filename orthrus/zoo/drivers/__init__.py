"""The zoo's drivers: one standalone script per engine, run by a release's own Python (its own
environment, built by orthrus.zoo.envs), never imported by the package.

A driver may import a module of its own from beside it (openai_answer.py, the server driver's reading
of answers), never the package. A driver imports only the standard library, the engine's package and what that package itself needs
(torch, numpy): the release under test is the only code that differs between a case's two runs, so
nothing of orthrus may run inside its process. The audit's side lives in the main environment and reads
what a driver writes (orthrus.zoo.judge).

    <release python> orthrus/zoo/drivers/<engine>.py SPEC.json OUT.jsonl

SPEC.json (written by orthrus.zoo.run):
    model           the subject as the engine reads it (a Hugging Face directory, or a GGUF file)
    draft           the draft model in the same form, or null
    prompts         [{"id": str, "ids": [int, ...]}, ...]  token ids, no tokenizer involved
    arms            {"reference": {...}, "speculative": {...}}: the engine's own keyword arguments for
                    each arm, as data (transformers: generate()'s; "assistant_model": "draft" names the
                    draft; llama-cpp-python: Llama()'s and create_completion()'s, see the driver)
    max_new_tokens  int
    samples         samples per prompt and arm (1 for a greedy case)
    seed            int; sample s of prompt i (its index in `prompts`) is drawn with seed + i * samples + s
                    (the driver seeds every RNG): no two draws share a seed, so the prompts' tests are
                    independent and their statistics add
    threads         int: torch.set_num_threads / n_threads
    logits          bool: the reference arm records its own top-2 [[id, logit], [id, logit]] at every
                    position it emitted (greedy cases: a divergence's verdict reads the engine's own margin)

OUT.jsonl, written to OUT.jsonl.tmp and renamed when complete:
    line 1          {"environment": {"engine": ..., "package": ..., "version": ..., "torch": ...,
                     "python": ..., "threads": ..., "dtype": ..., "platform": ..., anything else that
                     decides the arithmetic}}
    then per arm, prompt and sample:
                    {"arm": "reference"|"speculative", "prompt_id": str, "sample": int,
                     "tokens": [int, ...] (the new tokens only), "top2": [[[id, logit], [id, logit]], ...]
                     (reference arm with logits: true only)}
A driver exits non-zero with one line on stderr naming what failed; it writes no OUT.jsonl then.
"""
