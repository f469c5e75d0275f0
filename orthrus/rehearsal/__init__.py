"""The paper-scale rehearsal's stand-ins."""
