"""Helpers shared by the tests of the peers' workers (``tests/test_bench.py`` for PyG's,
``tests/test_bench_peers.py`` for DGL's)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.core.agreement import DisagreementError, compare
from bench.peers.client import PeerLayer


def swapped_attention_is_caught(worker, pair, impl: str, peer: str) -> dict[str, np.ndarray]:
    """Build row ``gat`` in ``worker`` as ``impl`` with its two attention vectors swapped and
    check that the agreement against ours (``pair``'s layer) fails, naming ``peer``; returns
    the wrong weights."""
    ours = pair._ours_outputs()
    wrong = dict(pair.params, att_src=pair.params["att_dst"])
    layer = PeerLayer(worker, "gat", impl, wrong, 16, 16)
    with pytest.raises(DisagreementError, match=f"{peer} and ours disagree"):
        compare(layer.outputs(), ours, names=(peer, "ours"))
    return wrong
