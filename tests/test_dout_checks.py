"""A layer's upstream gradient is checked before its backward runs: a NaN or an infinity
anywhere is refused with a clear error, the finiteness read off the bias's gradient (the sums
over vertices of ``dout``), and finite values whose sums overflow are not refused (the exact
test decides). A composed layer's tape hands those sums to its output bias: ``dout`` is
summed once."""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import nn

N = 12


def _graph():
    rng = np.random.default_rng(0)
    return gg.Graph.from_edges(rng.integers(0, N, 40), rng.integers(0, N, 40), N)


LAYERS = {
    "gcn": lambda: nn.GCNConv(3, 2),
    "sgc": lambda: nn.SGConv(3, 2, K=2),
    "gin": lambda: nn.GINConv([3, 4, 2]),
    "gin-one-linear": lambda: nn.GINConv([3, 2]),
    "linear": lambda: nn.Linear(3, 2),
    "gat": lambda: nn.GATConv(3, 2, heads=2),
    "gatv2": lambda: nn.GATv2Conv(3, 2),
    "sage": lambda: nn.SAGEConv(3, 2),
    "transformer": lambda: nn.TransformerConv(3, 2, heads=2),
}
BIAS = {"gin": "lin1.bias", "gin-one-linear": "lin0.bias", "sage": "b_l", "transformer": "b_skip"}


H0 = np.random.default_rng(1).standard_normal((N, 3)).astype(np.float32)


def _trained(name_or_make):
    """A layer (by its name in LAYERS, or made by a callable) after one training forward,
    and that forward's output."""
    make = LAYERS[name_or_make] if isinstance(name_or_make, str) else name_or_make
    layer = make()
    layer.train()
    return layer, layer(_graph(), H0)


def _spy(monkeypatch, ex, method: str, seen: list) -> None:
    """Record every array handed to ``ex``'s ``method`` in ``seen`` (then call it)."""
    real = getattr(type(ex), method)
    monkeypatch.setattr(type(ex), method,
                        lambda self, *arrays: seen.extend(arrays) or real(self, *arrays))


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_dout_is_refused(name, bad):
    layer, Z = _trained(name)
    dout = np.ones_like(Z)
    dout[N // 2, 1] = bad
    with pytest.raises(ValueError, match="dout contains NaN or Inf"):
        layer.backward(dout)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning",
                            "ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("name", list(LAYERS))
def test_finite_values_whose_sums_overflow_are_accepted(name):
    """float32's largest values in every row: each column's sum overflows to infinity, the
    exact test finds every value finite, and the bias's gradient is that sum."""
    layer, Z = _trained(name)
    dout = np.full_like(Z, np.finfo(np.float32).max)
    layer.backward(dout)
    bias = BIAS.get(name, "bias")
    assert np.isposinf(layer.grads[bias]).all()


@pytest.mark.parametrize("name", list(LAYERS))
def test_the_bias_gradient_is_the_sum_of_dout_over_vertices(name):
    layer, Z = _trained(name)
    dout = np.random.default_rng(2).standard_normal(Z.shape).astype(np.float32)
    layer.backward(dout)
    bias = BIAS.get(name, "bias")
    np.testing.assert_allclose(layer.grads[bias], dout.astype(np.float64).sum(0), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("name", ["gat", "gatv2", "sage", "transformer"])
def test_a_composed_layer_sums_dout_once(name, monkeypatch):
    """The check's sums are the output bias's gradient: ``dout`` is summed once and read by
    no finiteness test of its own."""
    layer, Z = _trained(name)
    dout = np.random.default_rng(3).standard_normal(Z.shape).astype(np.float32)
    summed, checked = [], []
    _spy(monkeypatch, layer.executor, "vertex_sum", summed)
    _spy(monkeypatch, layer.executor, "all_finite", checked)
    layer.backward(dout)
    assert [a is dout for a in summed].count(True) == 1
    assert not any(a is dout for a in checked)
    np.testing.assert_allclose(layer.grads[BIAS.get(name, "bias")],
                               dout.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [lambda: nn.GCNConv(3, 2, bias=False),
                                  lambda: nn.SGConv(3, 2, bias=False),
                                  lambda: nn.Linear(3, 2, bias=False)],
                         ids=["gcn", "sgc", "linear"])
def test_a_layer_without_a_bias_checks_dout_without_summing_it(make, monkeypatch):
    """No bias, no sum over vertices (on a grid an allreduce nothing would read); a NaN is
    refused all the same."""
    layer, Z = _trained(make)
    summed = []
    _spy(monkeypatch, layer.executor, "vertex_sum", summed)
    layer.backward(np.ones_like(Z))
    assert not summed and "bias" not in layer.grads
    bad = np.ones_like(Z)
    bad[0, 0] = np.nan
    layer(_graph(), H0)
    with pytest.raises(ValueError, match="dout contains NaN or Inf"):
        layer.backward(bad)
