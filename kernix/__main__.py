"""``python -m kernix ...``: the ``kernix`` command line (see :mod:`kernix.cli`)."""

import sys

from .cli import main

sys.exit(main())
