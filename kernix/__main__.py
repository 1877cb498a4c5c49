"""``python -m kernix ...``: the ``kernix`` command line (see :mod:`kernix.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
