"""``python -m perfgate.cli``."""

import sys

from perfgate.cli.main import main

sys.exit(main())
