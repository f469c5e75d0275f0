"""Data: prompts, prompt files, chat rendering, the teacher's corpus."""
