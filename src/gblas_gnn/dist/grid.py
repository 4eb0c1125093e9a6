r"""The √p×√p process grid and the one place where this package communicates.

``Grid()`` arranges the ``p = q²`` processes of an MPI communicator (``COMM_WORLD`` by
default) as a q×q Cartesian grid: rank (x, y) owns the block ``A[R_x, C_y]`` of the
adjacency. Its *row communicator* holds the q ranks with the same x (they own the same
target rows), its *column communicator* the q ranks with the same y (the same source
columns), and its *partner* is rank (y, x), which holds the row block ``R_y`` — the vertices
of this rank's column block ``C_y``.

Every message goes through the counted methods below (:meth:`Grid.allreduce`,
:meth:`Grid.exchange`, :meth:`Grid.allgather_rows`, :meth:`Grid.bcast`, ...), which record
per rank and per operation label the bytes sent and received, the messages and the seconds
spent waiting (:meth:`Grid.comm_stats`). The counts are the logical payloads, deterministic
for a given graph and grid:

* an allreduce of ``b`` bytes on a communicator of more than one rank sends and receives
  ``b`` bytes, one message (what MPI moves inside is its business);
* an exchange with the partner sends and receives the two buffers, one message each way;
  the diagonal ranks (x = y) are their own partner and move nothing;
* an allgather sends this rank's piece and receives the others' pieces;
* a reduce-scatter sends the pieces meant for the others and receives its own piece from
  each of the q − 1 others;
* a collective on a communicator of one rank (q = 1) moves nothing and counts nothing.

The grid also fixes how dense vertex tensors are laid out over it (``dense``):
``"replicated"`` (rank (x, y) holds the rows ``R_x``, the same on its whole grid row) or
``"sharded"`` (it holds the y-th of q slices of ``R_x``, about n/p rows):
:mod:`gblas_gnn.dist.layout`.
"""

from __future__ import annotations

import copy
import math
import pickle
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np

from ..executors.alignment import aligned_empty

__all__ = ["DENSE_LAYOUTS", "Grid", "GridError", "rebuild_error"]

#: the largest piece of one reduction of :meth:`Grid.reduce_scatter_rows`
REDUCE_PIECE_BYTES = 4 << 20

#: how dense vertex tensors may be laid out over the grid
DENSE_LAYOUTS = ("replicated", "sharded")


def check_dense(dense: str) -> str:
    """``dense`` if it names a layout of :data:`DENSE_LAYOUTS`, else ``ValueError``."""
    if dense not in DENSE_LAYOUTS:
        raise ValueError(f"dense must be one of {list(DENSE_LAYOUTS)}, got {dense!r}")
    return dense


class GridError(ValueError):
    """The processes cannot form a square grid."""


def rebuild_error(kind: str, message: str) -> Exception:
    """An exception of the builtin class named ``kind`` (else ``RuntimeError``)."""
    import builtins

    cls = getattr(builtins, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(message)


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:             # pragma: no cover (the dist extra installs it)
        raise ImportError("the distributed executor needs mpi4py and an MPI library: "
                          'pip install "gblas_gnn[dist]"') from exc
    return MPI


class _Stats:
    """Per-label counters of this rank."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.by_op: dict[str, dict[str, float]] = defaultdict(
            lambda: {"bytes_sent": 0, "bytes_received": 0, "messages": 0, "seconds": 0.0,
                     "cpu_seconds": 0.0})
        self.cpu_seconds = 0.0          # the running total (read by every executor op)

    def add(self, label: str, sent: int, received: int, messages: int, seconds: float,
            cpu_seconds: float = 0.0):
        entry = self.by_op[label]
        entry["bytes_sent"] += int(sent)
        entry["bytes_received"] += int(received)
        entry["messages"] += int(messages)
        entry["seconds"] += seconds
        entry["cpu_seconds"] += cpu_seconds
        self.cpu_seconds += cpu_seconds

    def summary(self) -> dict:
        total = {k: sum(e[k] for e in self.by_op.values())
                 for k in ("bytes_sent", "bytes_received", "messages", "seconds",
                           "cpu_seconds")}
        return {**total, "by_op": {k: dict(v) for k, v in self.by_op.items()}}


class Grid:
    """A q×q Cartesian grid over ``comm`` (default ``MPI.COMM_WORLD``).

    Attributes:
        comm: the Cartesian communicator (mpi4py); ``comm.rank`` is this rank.
        q: the side of the grid (``comm.size == q * q``).
        x, y: this rank's coordinates (row and column block).
        row, col: the row communicator (same x, ranked by y) and the column communicator
            (same y, ranked by x).
        partner: the rank (in ``comm``) at coordinates (y, x).
        dense: the layout of dense vertex tensors, ``"replicated"`` (default) or
            ``"sharded"`` (module docstring); :meth:`laid_out` gives the same grid with the
            other one.

    Raises:
        GridError: on every rank, before any communication, when the number of processes is
            not a perfect square.
    """

    def __init__(self, comm=None, dense: str = "replicated"):
        self.dense = check_dense(dense)
        MPI = _mpi()
        base = MPI.COMM_WORLD if comm is None else comm
        p = base.Get_size()
        q = math.isqrt(p)
        if q * q != p:
            raise GridError(f"the distributed executor needs a square number of processes "
                            f"(1, 4, 9, 16, ...) for its √p×√p grid, got {p}; "
                            f"run mpiexec -n {q * q} or -n {(q + 1) ** 2}")
        self.q = q
        self.comm = base.Create_cart((q, q), periods=(False, False), reorder=False)
        self.rank = self.comm.Get_rank()
        self.x, self.y = self.comm.Get_coords(self.rank)
        self.row = self.comm.Sub([False, True])
        self.col = self.comm.Sub([True, False])
        self.partner = self.comm.Get_cart_rank((self.y, self.x))
        self._stats = _Stats()

    def __repr__(self) -> str:
        return (f"Grid(q={self.q}, rank={self.rank}, coords=({self.x}, {self.y}), "
                f"dense={self.dense!r})")

    def laid_out(self, dense: str) -> Grid:
        """This grid (the same communicators and counters) with dense tensors laid out as
        ``dense``; no communication."""
        if check_dense(dense) == self.dense:
            return self
        twin = copy.copy(self)
        twin.dense = dense
        return twin

    @property
    def size(self) -> int:
        return self.q * self.q

    # ------------------------------------------------------------------ accounting
    def comm_stats(self) -> dict:
        """This rank's ``{"bytes_sent", "bytes_received", "messages", "seconds",
        "cpu_seconds", "by_op": {label: {...}}}`` since the last :meth:`reset_comm_stats`
        (``seconds``: wall time spent in the calls, waiting for other ranks included;
        ``cpu_seconds``: this process's CPU time in them)."""
        return self._stats.summary()

    def comm_cpu_seconds(self) -> float:
        """This process's CPU time in collectives since the last reset (cheap to read)."""
        return self._stats.cpu_seconds

    def reset_comm_stats(self) -> None:
        """Start counting afresh (on this grid and on its :meth:`laid_out` twins)."""
        self._stats.clear()

    @contextmanager
    def _timed(self, label: str, sent: int, received: int, messages: int):
        t0, c0 = time.perf_counter(), time.process_time()
        yield
        self._stats.add(label, sent, received, messages, time.perf_counter() - t0,
                        time.process_time() - c0)

    # ------------------------------------------------------------------ collectives
    def _comm(self, which: str):
        return {"row": self.row, "col": self.col, "world": self.comm}[which]

    def allreduce(self, array: np.ndarray, op: str, which: str, label: str) -> np.ndarray:
        """Element-wise ``op`` ("sum", "max", "min", "land", "maxloc", "minloc") of
        ``array`` over the ``which`` communicator ("row", "col" or "world"), in place; the
        result is the same on every member. (max|min)loc take a structured array of
        (value, index) pairs matching MPI's FLOAT_INT / DOUBLE_INT."""
        comm = self._comm(which)
        if comm.Get_size() == 1:
            return array
        MPI = _mpi()
        array = np.ascontiguousarray(array)
        mpi_op = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "land": MPI.LAND,
                  "maxloc": MPI.MAXLOC, "minloc": MPI.MINLOC}[op]
        if op in ("maxloc", "minloc"):
            kind = MPI.FLOAT_INT if array.dtype["v"] == np.float32 else MPI.DOUBLE_INT
            buf = [array, kind]
        else:
            buf = array
        with self._timed(label, array.nbytes, array.nbytes, 1):
            comm.Allreduce(MPI.IN_PLACE, buf, op=mpi_op)
        return array

    def allreduce_custom(self, array: np.ndarray, combine, which: str, label: str):
        """``combine(a, b)`` (commutative, associative) of ``array`` over ``which``: an MPI
        user operation for reductions MPI does not have (a user semiring's ⊕)."""
        comm = self._comm(which)
        if comm.Get_size() == 1:
            return array
        MPI = _mpi()
        array = np.ascontiguousarray(array)

        def reduce(inbuf, inoutbuf, datatype):
            a = np.frombuffer(inbuf, array.dtype).reshape(array.shape)
            b = np.frombuffer(inoutbuf, array.dtype).reshape(array.shape)
            b[...] = combine(a, b)

        op = MPI.Op.Create(reduce, commute=True)
        try:
            with self._timed(label, array.nbytes, array.nbytes, 1):
                comm.Allreduce(MPI.IN_PLACE, array, op=op)
        finally:
            op.Free()
        return array

    def exchange(self, array: np.ndarray, label: str, rows: int | None = None) -> np.ndarray:
        """Send ``array`` to the partner (y, x) and receive its counterpart: this rank's row
        block of a vertex tensor in, its column block out (or back). ``rows``: the number of
        rows to receive (the partner's row block; default the sent array's). The diagonal
        ranks return ``array`` itself; elsewhere the result is 64-byte aligned."""
        if self.partner == self.rank:
            return array
        array = np.ascontiguousarray(array)
        shape = (array.shape[0] if rows is None else rows, *array.shape[1:])
        return self.exchange_parts([array], [shape], label)[0]

    def exchange_parts(self, parts: Sequence[np.ndarray], shapes: Sequence[tuple[int, ...]],
                       label: str) -> list[np.ndarray]:
        """Send several C-contiguous arrays to the partner (y, x) as *one* message and
        receive its counterparts, ``shapes[i]`` (with ``parts[i]``'s dtype) for part ``i``.

        The parts go out from where they lie (an MPI struct datatype over their addresses:
        no packing copy); what comes in is one 64-byte aligned buffer whose consecutive
        pieces are returned as views, so nothing is unpacked either. Counted as one exchange
        of the parts' bytes, exactly as the exchange of their concatenation. The diagonal
        ranks return ``parts`` themselves."""
        parts = list(parts)
        if any(not p.flags.c_contiguous for p in parts):
            raise ValueError("exchange_parts sends C-contiguous arrays only")
        if self.partner == self.rank:
            return parts
        MPI = _mpi()
        sizes = [int(np.prod(shape, dtype=np.int64)) * p.dtype.itemsize
                 for p, shape in zip(parts, shapes, strict=True)]
        sent = sum(p.nbytes for p in parts)
        out = aligned_empty(sum(sizes), np.uint8)
        full = [p for p in parts if p.nbytes]
        if len(full) == 1:
            send, kind = full[0], None
        else:
            kind = MPI.Datatype.Create_struct([p.nbytes for p in full],
                                              [MPI.Get_address(p) for p in full],
                                              [MPI.BYTE] * len(full)).Commit()
            send = [MPI.BOTTOM, 1, kind]
        try:
            with self._timed(label, sent, out.nbytes, 2):
                self.comm.Sendrecv(send if full else [out[:0], MPI.BYTE], dest=self.partner,
                                   recvbuf=[out, MPI.BYTE], source=self.partner)
        finally:
            if kind is not None:
                kind.Free()
        views, start = [], 0
        for p, shape, size in zip(parts, shapes, sizes, strict=True):
            views.append(out[start:start + size].view(p.dtype).reshape(shape))
            start += size
        return views

    def allgather_rows(self, array: np.ndarray, counts: list[int], label: str,
                       which: str = "col") -> np.ndarray:
        """The pieces of every member of the ``which`` communicator ("col": R_0, …,
        R_{q-1} from the ranks at x = 0 … q-1; "row": by y; "world": in rank order),
        concatenated along the rows: ``counts[i]`` rows from member ``i``."""
        comm = self._comm(which)
        if comm.Get_size() == 1:
            return array
        MPI = _mpi()
        array = np.ascontiguousarray(array)
        width = int(np.prod(array.shape[1:], dtype=np.int64))
        out = aligned_empty((sum(counts), *array.shape[1:]), array.dtype)
        sizes = [c * width for c in counts]
        displs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
        # the predefined MPI datatype itself (``mpi4py.util.dtlib.from_numpy_dtype`` would
        # return a duplicate that must be freed)
        kind = MPI.Datatype.fromcode(array.dtype.char)
        with self._timed(label, array.nbytes, out.nbytes - array.nbytes, 1):
            comm.Allgatherv(array, [out, sizes, displs, kind])
        return out

    def reduce_scatter_rows(self, array: np.ndarray, counts: list[int], label: str,
                            which: str = "row", out: np.ndarray | None = None) -> np.ndarray:
        """The sum over the ``which`` communicator of ``array`` (the same shape on every
        member), of which member ``i`` keeps the ``counts[i]`` consecutive rows after those
        of the members before it (in ``out`` when given, else a new array).

        Run as one reduction to each member of its rows, in pieces of at most
        :data:`REDUCE_PIECE_BYTES`: Open MPI's ``MPI_Reduce_scatter`` holds about 1.5× the
        whole array in temporaries of its own (measured: +49 MiB of peak memory for a
        32 MiB array on 2 and 4 ranks), the pieces a few MiB. Counted as one reduce-scatter
        (module docstring)."""
        comm = self._comm(which)
        if comm.Get_size() == 1:
            if out is None:
                return array
            out[...] = array
            return out
        MPI = _mpi()
        array = np.ascontiguousarray(array)
        me = comm.Get_rank()
        if out is None:
            out = aligned_empty((counts[me], *array.shape[1:]), array.dtype)
        row_bytes = max(int(np.prod(array.shape[1:], dtype=np.int64)) * array.itemsize, 1)
        step = max(REDUCE_PIECE_BYTES // row_bytes, 1)
        own = out.nbytes
        with self._timed(label, array.nbytes - own, own * (comm.Get_size() - 1), 1):
            start = 0
            for member, rows in enumerate(counts):
                for lo in range(0, rows, step):
                    hi = min(rows, lo + step)
                    comm.Reduce(array[start + lo:start + hi],
                                out[lo:hi] if member == me else None, op=MPI.SUM,
                                root=member)
                start += rows
        return out

    def alltoallv(self, array: np.ndarray, counts: np.ndarray, label: str) -> np.ndarray:
        """Send ``counts[r]`` consecutive entries of the 1-D ``array`` to rank ``r`` (in rank
        order) and receive what every rank sends here, concatenated in rank order."""
        if self.size == 1:
            return array
        MPI = _mpi()
        array = np.ascontiguousarray(array)
        counts = np.asarray(counts, np.int64)
        incoming = np.empty(self.size, np.int64)
        self.comm.Alltoall(counts, incoming)
        out = np.empty(int(incoming.sum()), array.dtype)
        kind = MPI.Datatype.fromcode(array.dtype.char)

        def displs(c):
            return np.concatenate([[0], np.cumsum(c)[:-1]]).astype(np.int64)

        mine = counts[self.rank]
        item = array.dtype.itemsize
        with self._timed(label, (counts.sum() - mine) * item, (incoming.sum() - mine) * item,
                         2 * (self.size - 1)):
            self.comm.Alltoallv([array, counts, displs(counts), kind],
                                [out, incoming, displs(incoming), kind])
        return out

    def bcast(self, value, label: str, root: int = 0):
        """A Python object from ``root`` to every rank (small control data; its pickle is
        what is counted)."""
        if self.size == 1:
            return value
        data = pickle.dumps(value) if self.rank == root else None
        with self._timed(label, 0, 0, 1):
            data = self.comm.bcast(data, root=root)
        mine = len(data)
        self._stats.add(label, mine if self.rank == root else 0,
                        0 if self.rank == root else mine, 0, 0.0)
        return pickle.loads(data)

    def allgather(self, value, label: str) -> list:
        """Every rank's Python object, in rank order (small control data; the pickles are
        what is counted)."""
        if self.size == 1:
            return [value]
        data = pickle.dumps(value)
        with self._timed(label, 0, 0, 1):
            gathered = self.comm.allgather(data)
        self._stats.add(label, len(data), sum(len(d) for d in gathered) - len(data), 0, 0.0)
        return [pickle.loads(d) for d in gathered]

    @contextmanager
    def agreed(self, label: str = "validation"):
        """Run the block on every rank; an error in any rank is raised in every rank (the
        failing rank's own exception, the others a copy naming it), so that no rank is left
        waiting in a collective. The block must not communicate itself."""
        error = None
        try:
            yield
        except Exception as exc:             # noqa: BLE001 - every error is shared
            error = exc
        report = None if error is None else (type(error).__name__, str(error))
        reports = self.allgather(report, label)
        if error is not None:
            raise error
        failed = [(rank, r) for rank, r in enumerate(reports) if r is not None]
        if failed:
            rank, (kind, message) = failed[0]
            raise rebuild_error(kind, f"rank {rank}: {message}")

    def barrier(self) -> None:
        if self.size > 1:
            self.comm.Barrier()
