"""`swerollout dev`: the embedded default on one machine (control plane, operator, node agent)."""
