import sys

from orthrus.cli import script

sys.exit(script())
