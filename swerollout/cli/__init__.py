"""The `swerollout` command line."""
