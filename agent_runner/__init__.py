"""The agent runner: the agent loop that runs in the rollout pod beside the sandbox."""
