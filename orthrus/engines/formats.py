"""The files exchanged with engines outside this package, field by field (pure Python, as
orthrus/contracts.py, whose tables they feed; orthrus/artefacts.py catalogues them for docs/DESIGN.md)."""

# The way in and out for engines outside this package: the evaluation set as an engine needs it
# (`orthrus export-prompts`, one JSON object per line and prompt) and the trajectory file an engine
# writes back (decode.external; `orthrus ingest` checks it and writes a decoding result).
EXPORT_FIELDS = [
    "prompt_id",
    "domain",
    "prompt",
    "messages",
    "prompt_text",
    "prompt_token_ids",
    "max_new_tokens",
    "stop_token_ids",
    "temperature",
    "message",
]
EXTERNAL_REQUIRED = ["prompt_id", "token_ids", "env"]
EXTERNAL_FIELDS = EXTERNAL_REQUIRED + [
    "text",
    "finish_reason",
    "prompt_token_ids",
    "accepted",
    "forwards",
    "draft_forwards",
    "seconds",
    "settings",
    "logprobs",
    "extra",
]
# sampled engines (sampling.engines; `orthrus engine-samples`): the sampled export adds the two-sample test's
# settings to each record (max_new_tokens is its m), an engine writes N samples per prompt back
SAMPLED_EXPORT_FIELDS = EXPORT_FIELDS + ["top_p", "top_k", "n_samples"]
SAMPLED_REQUIRED = ["prompt_id", "samples", "env"]
SAMPLED_FIELDS = SAMPLED_REQUIRED + ["extra"]
