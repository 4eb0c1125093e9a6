"""Compile every kernel of the ``cuda`` executor for a GPU architecture, without a GPU.

numba-cuda turns a kernel and a signature into PTX for a chosen compute capability
(``numba.cuda.compile_ptx``; no driver needed) and ``ptxas`` from the CUDA toolkit wheel
(``nvidia-cuda-nvcc-cu12``, part of numba-cuda's ``cu12`` extra) assembles the PTX for the
real architecture and reports the resources of the kernel: registers per thread, static
shared memory, stack frame and register spills. With the launch shape the executor uses
(:mod:`._device`) they give the theoretical occupancy, the fraction of an SM's warp slots the
kernel can keep resident.

numba-cuda compiles a kernel's *device functions* for "the current device" and asks the
driver which one that is; without a driver :func:`compile_kernel` answers for it with the
target architecture (the device functions here use no architecture-dependent feature beyond
what sm_60 and later share).

Run ``python -m gblas_gnn.gpu.compile [--cc 8.0 9.0]`` for the table; the test suite holds
every kernel to "compiles, no spill" for sm_80 and sm_90: the hand-written ones and those
generated from the edge programs of a representative set of formulations
(:mod:`._program_catalogue`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

from ._catalogue import KernelSpec, variants
from ._device import ELEMENT_BLOCK, GROUPS_PER_BLOCK, LANES, SIMULATOR
from ._program_catalogue import all_kernels

__all__ = ["Resources", "ARCHITECTURES", "compile_kernel", "compile_kernels", "ptxas_path",
           "assemble", "occupancy", "report"]


@dataclass(frozen=True)
class _Arch:
    """The per-SM limits of an architecture that bound occupancy (CUDA occupancy calculator;
    shared memory: the largest carve-out, with 1 KiB per block reserved by the runtime)."""

    warps: int
    blocks: int
    registers: int
    shared: int
    reserved_shared: int = 1024
    register_unit: int = 256


#: compute capability → limits: A100 (8.0) and H100 (9.0)
ARCHITECTURES = {(8, 0): _Arch(warps=64, blocks=32, registers=65536, shared=167936),
                 (9, 0): _Arch(warps=64, blocks=32, registers=65536, shared=233472)}


@dataclass(frozen=True)
class Resources:
    """What ``ptxas -v`` reported for one kernel variant, and its occupancy."""

    kernel: str
    variant: str
    cc: str
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    threads_per_block: int
    occupancy: float

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@contextmanager
def _target(cc: tuple[int, int]):
    """Answer numba-cuda's "current device" question with ``cc`` (no driver here)."""
    from numba.cuda import dispatcher

    before = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = before


def compile_kernels(spec: KernelSpec, signature, ccs) -> dict[tuple[int, int], str]:
    """The PTX of ``spec``'s kernel for ``signature``, for each compute capability in
    ``ccs``: typed and lowered once (for the lowest; nothing in these kernels depends on
    the architecture above sm_60), then NVVM's code generation once per architecture: a
    sample of the catalogue's kernels took 18.1 s against 31.8 s for one
    ``numba.cuda.compile_ptx`` per architecture, with the same resources in ``ptxas``'s
    report (checked by hand on 42 kernel variants, each for both architectures; a test holds
    two kernels to it)."""
    if SIMULATOR:
        raise RuntimeError("kernels are compiled for a GPU only outside the simulator "
                           "(unset NUMBA_ENABLE_CUDASIM)")
    from numba.cuda.compiler import _compile_pyfunc_with_fixup  # numba-cuda 0.30 (pinned)

    ccs = sorted(set(ccs))
    with _target(ccs[0]):
        library, _ = _compile_pyfunc_with_fixup(spec.kernel.py_func, signature, device=False,
                                                abi="numba", cc=ccs[0])
        return {cc: _one_ptx(library.get_asm_strs(cc=cc), spec) for cc in ccs}


def _one_ptx(codes: list[str], spec: KernelSpec) -> str:
    if len(codes) != 1:
        raise RuntimeError(f"{spec.name} compiles to {len(codes)} PTX modules, not one")
    return codes[0]


def compile_kernel(spec: KernelSpec, signature, cc: tuple[int, int]) -> str:
    """The PTX of ``spec``'s kernel for ``signature`` and compute capability ``cc``."""
    return compile_kernels(spec, signature, [cc])[cc]


def ptxas_path() -> str:
    """``ptxas`` of the CUDA toolkit wheel (or on the PATH)."""
    try:
        import nvidia.cuda_nvcc as nvcc

        candidate = Path(list(nvcc.__path__)[0]) / "bin" / "ptxas"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("ptxas")
    if found is None:
        raise FileNotFoundError("ptxas not found: pip install 'numba-cuda[cu12]' (the CUDA 12 "
                                "toolkit wheels)")
    return found


_FIELDS = {"registers": r"Used (\d+) registers", "shared_bytes": r"(\d+) bytes smem",
           "stack_bytes": r"(\d+) bytes stack frame",
           "spill_stores": r"(\d+) bytes spill stores",
           "spill_loads": r"(\d+) bytes spill loads"}


def assemble(ptx: str, cc: tuple[int, int], max_registers: int | None = None
             ) -> dict[str, int]:
    """Assemble ``ptx`` for ``sm_XY`` with ``ptxas -v`` (``max_registers``: its
    ``-maxrregcount``, to see what a register cap would spill); its resource report as
    numbers. Raises ``RuntimeError`` with ptxas's message when it fails."""
    cap = [] if max_registers is None else [f"-maxrregcount={max_registers}"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        done = subprocess.run([ptxas_path(), f"-arch=sm_{cc[0]}{cc[1]}", "-v", *cap, str(path),
                               "-o", str(Path(tmp) / "kernel.cubin")],
                              capture_output=True, text=True)
    text = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"ptxas failed for sm_{cc[0]}{cc[1]}: {text}")
    out = {}
    for name, pattern in _FIELDS.items():
        found = re.search(pattern, text)
        out[name] = int(found.group(1)) if found else 0
    return out


def occupancy(registers: int, shared_bytes: int, threads: int, cc: tuple[int, int]) -> float:
    """Resident warps per SM over the SM's warp slots, for blocks of ``threads`` threads
    using ``registers`` per thread and ``shared_bytes`` of shared memory per block."""
    arch = ARCHITECTURES[cc]
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // arch.register_unit) * arch.register_unit
    limits = [arch.warps // warps, arch.blocks,
              (arch.registers // per_warp) // warps,
              arch.shared // (shared_bytes + arch.reserved_shared)]
    return min(limits) * warps / arch.warps


def threads_per_block(spec: KernelSpec) -> int:
    """The block size the executor launches ``spec`` with (on hardware)."""
    return GROUPS_PER_BLOCK * LANES if spec.launch == "group" else ELEMENT_BLOCK


def report(ccs=((8, 0), (9, 0)), kernels=None) -> list[Resources]:
    """Compile and assemble every variant of every kernel (default: all, the generated
    kernels of the representative formulations included) for every ``cc``."""
    rows = []
    for spec in all_kernels() if kernels is None else kernels:
        threads = threads_per_block(spec)
        for label, signature in variants(spec):
            for cc, ptx in compile_kernels(spec, signature, ccs).items():
                r = assemble(ptx, cc)
                rows.append(Resources(spec.name, label, f"{cc[0]}.{cc[1]}", r["registers"],
                                      r["shared_bytes"], r["stack_bytes"], r["spill_stores"],
                                      r["spill_loads"], threads,
                                      occupancy(r["registers"], r["shared_bytes"], threads,
                                                cc)))
    return rows


def _table(rows: list[Resources]) -> str:
    lines = ["| kernel | types | cc | registers | shared B | stack B | spills B | "
             "threads/block | occupancy |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.kernel} | {r.variant} | {r.cc} | {r.registers} | "
                     f"{r.shared_bytes} | {r.stack_bytes} | {r.spills} | "
                     f"{r.threads_per_block} | {r.occupancy:.0%} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gblas_gnn.gpu.compile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", nargs="+", default=["8.0", "9.0"],
                        help="compute capabilities (default 8.0 9.0)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    ccs = [tuple(int(v) for v in cc.split(".")) for cc in args.cc]
    unknown = [cc for cc in ccs if cc not in ARCHITECTURES]
    if unknown:
        parser.error(f"unknown compute capability {unknown}; known: "
                     f"{[f'{a}.{b}' for a, b in ARCHITECTURES]}")
    rows = report(ccs)
    if args.json:
        import json
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(_table(rows))
    return 1 if any(r.spills for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
