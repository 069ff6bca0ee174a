"""`python -m agent_runner`: the runner container's entry point (see session.py)."""

import sys

from swerollout.tokenizers import keep_torch_out

# Before anything imports transformers: the runner tokenizes and never runs a model.
keep_torch_out()

from agent_runner.pod.session import main  # noqa: E402

sys.exit(main())
