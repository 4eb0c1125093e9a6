"""Plain SpMM ``A @ H`` of the case's graph (with self loops) in three libraries.

The yardstick for "our GAT forward costs at most 3× the fastest plain SpMM of the same ``A``
and ``H``": scipy's CSR product (on the host only), ``torch.sparse.mm`` on a CSR tensor (on
PyG's device: cuSPARSE on a GPU), ``plus_times`` through :func:`gblas_gnn.ops.spmm` on the
executor under test (``gblas_gnn plus_times`` on the cpu executor, whose kernel is a numba
row pass, ``<name> plus_times`` on another) and, on the host, SuiteSparse's own in-place
``saxpy5`` (``GraphBLAS plus_times``: ``Z << 0; Z(accum=plus) << A plus_times H``, the copy
of ``H`` into GraphBLAS included). All read float32 values 1.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

__all__ = ["spmm_baselines"]


def spmm_baselines(g, H: np.ndarray, with_torch: bool = True, executor: str = "cpu",
                   device=None) -> dict[str, Callable[[], object]]:
    """Zero-argument callables computing ``A H`` for ``A = g.with_self_loops().A``.

    Parameters
    ----------
    g : gblas_gnn.Graph
        The case's graph (the self-looped form is the one the layers use).
    H : ndarray (n, k) float32
        Dense operand.
    with_torch : bool
        Include ``torch.sparse.mm`` (imports torch).
    executor : str
        The executor of our SpMM.
    device : bench.core.device.BenchDevice, optional
        Where torch runs (default the host).

    Returns
    -------
    dict
        ``{"scipy csr @ H", "torch.sparse.mm (CSR)", "GraphBLAS plus_times",
        "gblas_gnn plus_times"}`` → callable (the executor's name instead of ``gblas_gnn``
        off the cpu executor; no scipy or GraphBLAS row on a GPU).
    """
    import scipy.sparse as sp

    from gblas_gnn import ops
    from gblas_gnn.executors import CPUExecutor, get_executor

    A = g.with_self_loops().A
    d = A.ss.export("csr", give_ownership=False, sort=True)
    indptr, indices = d["indptr"].astype(np.int64), d["col_indices"].astype(np.int64)
    ones = np.ones(indices.shape[0], np.float32)
    csr = sp.csr_matrix((ones, indices, indptr), shape=(g.n, g.n))
    on_host = device is None or not device.on_gpu
    fns: dict[str, Callable[[], object]] = {"scipy csr @ H": lambda: csr @ H} if on_host \
        else {}
    if with_torch:
        import torch

        with warnings.catch_warnings():     # "beta state" / "invariant checks" notices
            warnings.simplefilter("ignore", UserWarning)
            At = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                         torch.from_numpy(ones), size=(g.n, g.n))
        Ht = torch.from_numpy(H)
        if not on_host:
            At, Ht = At.to(device.torch_device), Ht.to(device.torch_device)
        fns["torch.sparse.mm (CSR)"] = lambda: torch.sparse.mm(At, Ht)
    if on_host:
        from graphblas import binary, semiring

        from gblas_gnn.executors.cpu._gbio import inplace_mxm

        fns["GraphBLAS plus_times"] = lambda: inplace_mxm(
            A, H, semiring.plus_times["FP32"], binary.plus["FP32"], 0)
    ex = get_executor(executor)
    Hx = ex.asarray(H)
    label = "gblas_gnn" if isinstance(ex, CPUExecutor) else ex.name
    fns[f"{label} plus_times"] = lambda: ops.spmm(A, Hx, executor=ex)
    return fns
