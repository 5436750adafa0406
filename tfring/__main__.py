"""`python -m tfring ...`: the same as the `tfring` command."""

import sys

from tfring.cli import main

sys.exit(main())
