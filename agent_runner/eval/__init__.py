"""Eval mode: apply a candidate patch in a fresh sandbox, run the tests, grade them."""
