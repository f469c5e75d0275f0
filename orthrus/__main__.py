import sys

from orthrus.cli import main

sys.exit(main())
