"""`python -m agent_runner`: the runner container's entry point (see session.py)."""

import sys

from agent_runner.session import main

sys.exit(main())
