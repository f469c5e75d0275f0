"""How a prompt becomes model input: the chat rendering every stage shares."""
from __future__ import annotations

SYSTEM_PROMPT = ""
# How a prompt becomes chat messages, a per-stage setting: "empty" (an empty system message, then
# the user turn: the follow-up paper's trajectory study and this project's default), "none" (the
# user turn alone: the authors' TPF script and training data) or "system:<text>" (a custom one).
MESSAGE_FORMATS = ("empty", "none")


def check_message(message: str) -> str:
    if message in MESSAGE_FORMATS or (isinstance(message, str) and message.startswith("system:")):
        return message
    raise ValueError(f"message format must be 'empty', 'none' or 'system:<text>', got {message!r}")


def chat_messages(prompt: str, message: str = "empty") -> list[dict]:
    check_message(message)
    user = [{"role": "user", "content": prompt}]
    if message == "none":
        return user
    system = SYSTEM_PROMPT if message == "empty" else message[len("system:"):]
    return [{"role": "system", "content": system}] + user


def render_chat(tokenizer, prompt: str, message: str = "empty") -> list[int]:
    """Chat-rendered prompt token ids: the messages of `message` (default: empty system
    message, then the user `prompt`), assistant turn opened, thinking disabled (Qwen3
    `enable_thinking=False`)."""
    text = tokenizer.apply_chat_template(chat_messages(prompt, message), tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
