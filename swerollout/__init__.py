"""swerollout: agentic RL rollouts of software-engineering tasks on Kubernetes."""

__version__ = "0.1.0"
