"""The agent: its loop, its tools and its configuration; it sees the policy only through policy.model."""
