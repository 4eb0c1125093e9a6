"""Our layers at two git revisions in one interleaved run (:mod:`.compare`, ``python -m bench
revisions``), one long-lived worker per side (:mod:`.worker`).
"""
