"""`python -m agent_runner.eval`: grade one patch in a fresh sandbox (see harness.main)."""

import sys

from .harness import main

sys.exit(main())
