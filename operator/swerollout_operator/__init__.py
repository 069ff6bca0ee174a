"""The swerollout operator: reconciles SWERollouts into rollout pods, eval pods and status.

It lives in operator/ (a source folder, not a package) because `operator` is a
standard-library module that must stay importable.
"""
