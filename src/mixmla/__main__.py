"""``python -m mixmla``: the same as the ``mixmla`` console script."""

import sys

from .cli import main

sys.exit(main())
