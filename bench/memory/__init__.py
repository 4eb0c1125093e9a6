"""The memory study, ``python -m bench memory``: how many bytes per stored entry one training
step of the 3-layer GAT (the XL recipe) holds in one process, and which arrays they are.

:mod:`.step` (the fresh-process worker: the headline peak RSS, or with ``--breakdown`` the
traced allocations by component), :mod:`.study` (the command: one worker per scale and mode,
JSON and markdown in ``bench/results/current/``).
"""
