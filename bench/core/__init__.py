"""Infrastructure every study shares: the cases and their data (:mod:`.cases`), interleaved
timing (:mod:`.timing`), agreement of two implementations (:mod:`.agreement`), thread
settings (:mod:`.threads`), memory readings and limits (:mod:`.rss`, :mod:`.guard`), the
fresh-subprocess worker plumbing (:mod:`.worker`), where a benchmark runs (:mod:`.device`)
and what it ran on (:mod:`.environment`).

These modules import only numpy and the standard library at import time: the DGL peer's
worker, in an environment without our library, imports them too.
"""
