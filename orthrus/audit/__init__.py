"""The audit: verdicts on divergences, forensics, replay."""
