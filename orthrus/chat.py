"""How a prompt becomes model input: the chat rendering every stage shares."""

from __future__ import annotations

from orthrus.options import MESSAGE_FORMATS, DecodeOptions, check_message  # noqa: F401  (re-exported)

SYSTEM_PROMPT = ""


def chat_messages(prompt: str, message: str = DecodeOptions.message) -> list[dict]:
    check_message(message)
    user = [{"role": "user", "content": prompt}]
    if message == "none":
        return user
    system = SYSTEM_PROMPT if message == "empty" else message[len("system:") :]
    return [{"role": "system", "content": system}] + user


def render_chat(tokenizer, prompt: str, message: str = DecodeOptions.message) -> list[int]:
    """Chat-rendered prompt token ids: the messages of `message` (a `DecodeOptions.message`; by
    default an empty system message, then the user `prompt`), assistant turn opened, thinking
    disabled (Qwen3 `enable_thinking=False`)."""
    text = tokenizer.apply_chat_template(
        chat_messages(prompt, message), tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
