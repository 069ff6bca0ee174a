"""The `swerollout dev up` stack: a supervisor that runs the control plane, operator, node agent and policy server."""
