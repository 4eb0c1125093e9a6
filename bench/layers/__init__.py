"""The layer study, ``python -m bench run``: our layers against PyTorch Geometric's (and DGL's,
:mod:`bench.peers`) on one graph, input and set of weights.

:mod:`.rows` (the layer rows), :mod:`.pair` (the callables timed), :mod:`.run` (one case end
to end), :mod:`.baselines` (plain SpMM), the fresh-process workers :mod:`.memory` (peak memory
of one layer) and :mod:`.epoch` (training epochs of the XL case), :mod:`.report` (JSON,
markdown, PNG).
"""
