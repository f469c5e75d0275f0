"""The one user-facing error type: bad input said in one line that names it.

`orthrus <command>` (orthrus/cli.py) turns it into that line on stderr and exit code 2; any
other exception is a bug and keeps its traceback. Each stage's own errors subclass it.
"""


class InputError(ValueError):
    """A bad input (file, option, model, config value), said in one line naming it."""


class MissingInputError(InputError, FileNotFoundError):
    """An input that does not exist (a model path, a file): still a FileNotFoundError to callers."""


class ModelError(InputError):
    """A model directory or checkpoint that cannot be used as it is: names the path and the problem."""


class ConfigError(InputError):
    """A study config's problems (orthrus/plan/study_config.py), one line each, naming its key (or the
    file and line): `key.path: what is wrong`."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
