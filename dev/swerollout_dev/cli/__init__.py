"""The dev tooling's `swerollout` commands, registered through the `swerollout.commands` entry points."""
