"""`python -m harness.cli`: the `kchaos` command."""

import sys

from harness.cli import main

sys.exit(main())
