"""What fit shows and leaks: the kernel warm-up, the progress bar, numpy's overflow warnings."""

from __future__ import annotations

import numpy as np
import pytest
from test_train_trainer import gcn, synthetic

from gblas_gnn.cli import main
from gblas_gnn.train import SGD, fit

SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


@pytest.fixture(scope="module")
def data():
    return synthetic()


def test_overflow_warnings_do_not_leak(data, recwarn):
    model = gcn()
    with pytest.raises(FloatingPointError, match="a floating-point overflow or NaN"):
        fit(model, data, SGD(model, lr=1e30), epochs=5, progress=False)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    # numpy's error state is the caller's again
    assert np.geterr()["over"] == "warn"


@pytest.mark.parametrize("model", ["gat", "gcn", "sgc"])
def test_command_line_divergence_is_one_line(model, capsys, recwarn):
    code = main(["train", "--model", model, "--dataset", SMALL, "--lr", "1e30",
                 "--epochs", "5", "--no-progress"])
    err = capsys.readouterr().err
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    if code:      # sgc: Adam's second moment overflows to Inf, the weights stay finite
        assert code == 1 and err.count("\n") == 1 and "RuntimeWarning" not in err
        assert err.startswith("gblas-gnn: non-finite") and "smaller learning rate" in err
