"""``python -m gblas_gnn.codegen.compile_report LOG [N]``: what a compile log
(:mod:`.compile_log`) holds: the compiles, their seconds and processes, then the ``N``
(default 15) tests and functions that compiled longest."""

from __future__ import annotations

import sys

from .compile_log import read, summarise

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print :func:`summarise` of the log ``argv[0]``: totals, then the ``argv[1]`` (default
    15) tests and functions that compiled longest."""
    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) > 2:
        print("usage: python -m gblas_gnn.codegen.compile_report LOG [N]", file=sys.stderr)
        return 2
    top = int(args[1]) if len(args) > 1 else 15
    s = summarise(read(args[0]))
    print(f"{s['compiles']} compiles of {s['functions']} functions in {s['processes']} "
          f"processes, {s['seconds']:.1f} s")
    for title in ("by_test", "by_function"):
        print(f"\n{title.replace('_', ' ')}: compiles, seconds")
        for name, (n, sec) in list(s[title].items())[:top]:
            print(f"  {n:5d} {sec:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
