"""Adapters that plug swerollout into the RL trainers people use: verl, AReaL, slime, siiRL.

Each framework has one module (``swerollout.trainers.verl``, ``.areal``, ``.slime``,
``.siirl``) that imports that framework; importing this package imports none of them,
so ``pip install 'swerollout[trainers]'`` works beside whichever trainer is installed.
The record -> token-array rule they all share lives in :mod:`swerollout.trainers._records`.
Pages: docs/trainers.md.
"""
