"""`python -m agent_runner`: the runner container's entry point (see session.py)."""

import sys

from swerollout.tokenizers import keep_torch_out

# Before anything imports transformers: the runner tokenizes and never runs a model.
keep_torch_out()
# httpx imports its command line (rich and click) whenever they are installed, and swe-rex
# installs them: 0.2 CPU-s of every runner start for a CLI the runner never runs. A None
# entry reads as "not installed", and httpx then defines a stub in its place.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

from agent_runner.pod.session import main  # noqa: E402

sys.exit(main())
