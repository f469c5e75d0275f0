"""`python -m orthrus.lmeval <sub>`: the package is imported first, so the model is registered once."""

import sys

from orthrus.lmeval.cli import main

sys.exit(main())
