"""`python -m tfring.run -np N COMMAND ...`: the same as `tfring run`."""

import sys

from tfring.cli import main

if __name__ == "__main__":
    sys.exit(main(["run"] + sys.argv[1:]))
