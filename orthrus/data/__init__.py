"""Data: prompts, prompt files, the teacher's corpus."""
