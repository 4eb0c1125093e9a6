"""The environments of the peer libraries the harness compares against (DGL), outside the tree.

DGL never enters the project's dependencies: our environment keeps torch 2.13 (for PyG),
and ``dgl==2.1.0`` — the newest DGL with a Linux CPython 3.11 wheel on PyPI (2.2.1 has
none) — has its graphbolt and sparse libraries built for torch 2.0.0–2.2.1. So DGL lives in
a virtual environment of its own, created by ``python -m bench peers --setup``:

* ``torch==2.2.1`` (PyPI's CUDA 12.1 build, ~2.5 GB with its ``nvidia-*`` wheels; it runs on
  the CPU), ``dgl==2.1.0``, ``torchdata==0.7.1`` (DGL's graphbolt imports it), ``numpy<2``
  (torch 2.2.1 and DGL 2.1.0 are built against numpy 1), and ``pandas``, ``pyyaml`` and
  ``pydantic``, which ``import dgl`` needs (its graphbolt package imports them) without
  declaring them;
* in ``$GBLAS_GNN_PEERS_DIR`` (default ``$XDG_CACHE_HOME/gblas_gnn/bench-peers``, i.e.
  ``~/.cache/gblas_gnn/bench-peers``), one folder per peer and version (``dgl-2.1.0``);
* the first ``import dgl`` writes ``~/.dgl/config.json`` (DGL's own backend setting).

The DGL side then runs in a worker process of that environment (:mod:`.client`,
:mod:`.dgl_worker`); the files it reads and writes are ``.npz`` arrays and JSON lines.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PeerEnv", "PEERS", "PeerMissing", "peers_dir", "setup_plan", "setup",
           "installed_versions", "require"]

#: the command that creates the peer environments (named in every error about them)
SETUP_COMMAND = "python -m bench peers --setup"


class PeerMissing(RuntimeError):
    """A peer's environment does not exist (or is broken): the message says how to make it."""


@dataclass(frozen=True)
class PeerEnv:
    """One peer library's environment.

    Attributes
    ----------
    name : str
        The peer's name on the command line (``dgl``).
    folder : str
        Folder of its virtual environment below :func:`peers_dir`.
    requirements : tuple of str
        What ``pip install`` gets, pinned.
    modules : tuple of str
        Distributions whose versions are recorded (``importlib.metadata`` names).
    probe : str
        A Python statement that must run in the environment (imports the peer).
    """

    name: str
    folder: str
    requirements: tuple[str, ...]
    modules: tuple[str, ...]
    probe: str

    def path(self, root: Path | None = None) -> Path:
        """The environment's folder."""
        return (root or peers_dir()) / self.folder

    def python(self, root: Path | None = None) -> Path:
        """The environment's interpreter."""
        return self.path(root) / "bin" / "python"


PEERS: dict[str, PeerEnv] = {
    "dgl": PeerEnv("dgl", "dgl-2.1.0",
                   ("torch==2.2.1", "dgl==2.1.0", "torchdata==0.7.1", "numpy<2", "pandas",
                    "pyyaml", "pydantic"),
                   ("dgl", "torch", "torchdata", "numpy", "scipy", "pandas", "pyyaml",
                    "pydantic"),
                   "import dgl, dgl.sparse, torch"),
}

#: file in each environment that records what was installed (written by :func:`setup`)
VERSIONS_FILE = "bench-peer.json"


def peers_dir() -> Path:
    """Where the peer environments live (see the module docstring)."""
    if os.environ.get("GBLAS_GNN_PEERS_DIR"):
        return Path(os.environ["GBLAS_GNN_PEERS_DIR"]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "gblas_gnn" / "bench-peers"


def _get(name: str) -> PeerEnv:
    try:
        return PEERS[name]
    except KeyError:
        raise ValueError(f"unknown peer {name!r}; choose from {sorted(PEERS)}") from None


_VERSIONS_SCRIPT = ("import json, sys, platform\n"
                    "from importlib import metadata\n"
                    "v = {}\n"
                    "for m in sys.argv[1:]:\n"
                    "    try: v[m] = metadata.version(m)\n"
                    "    except metadata.PackageNotFoundError: v[m] = None\n"
                    "v['python'] = platform.python_version()\n"
                    "print(json.dumps(v))\n")


def setup_plan(name: str = "dgl", root: Path | None = None,
               python: str | None = None) -> list[list[str]]:
    """The commands :func:`setup` runs for peer ``name``, in order.

    Parameters
    ----------
    name : str
        A key of :data:`PEERS`.
    root : Path, optional
        Folder of the environments (default :func:`peers_dir`).
    python : str, optional
        Interpreter that creates the environment (default this one).

    Returns
    -------
    list of list of str
        Create the venv; ``pip install`` the pinned requirements from PyPI; import the peer
        once (DGL writes ``~/.dgl/config.json`` then).
    """
    peer = _get(name)
    venv = str(peer.python(root))
    return [[python or sys.executable, "-m", "venv", str(peer.path(root))],
            [venv, "-m", "pip", "install", "--no-input", *peer.requirements],
            [venv, "-c", peer.probe]]


def setup(name: str = "dgl", root: Path | None = None, dry_run: bool = False,
          echo=print) -> dict:
    """Create peer ``name``'s environment (idempotent: pip skips what is there) and record
    the installed versions in it; returns them (see :func:`installed_versions`).

    ``dry_run`` only prints the commands. A failing command raises
    :class:`subprocess.CalledProcessError` (its output went to this terminal).
    """
    for cmd in setup_plan(name, root):
        echo("$ " + shlex.join(cmd))
        if not dry_run:
            subprocess.run(cmd, check=True)
    if dry_run:
        return {}
    versions = _query_versions(_get(name), root)
    (_get(name).path(root) / VERSIONS_FILE).write_text(json.dumps(versions, indent=2) + "\n")
    return versions


def _query_versions(peer: PeerEnv, root: Path | None) -> dict:
    out = subprocess.run([str(peer.python(root)), "-c", _VERSIONS_SCRIPT, *peer.modules],
                         capture_output=True, text=True, check=True).stdout
    versions = json.loads(out)
    versions["venv"] = str(peer.path(root))
    return versions


def require(name: str = "dgl", root: Path | None = None) -> Path:
    """The interpreter of peer ``name``'s environment; :class:`PeerMissing` (saying to run
    ``python -m bench peers --setup``) when it has not been set up."""
    peer = _get(name)
    python = peer.python(root)
    if not python.exists() or not (peer.path(root) / VERSIONS_FILE).exists():
        raise PeerMissing(f"the {name} peer's environment is not set up (looked for "
                          f"{peer.path(root)}): run `{SETUP_COMMAND}` first (it creates a "
                          f"virtual environment with {', '.join(peer.requirements)} from "
                          "PyPI, outside the project's dependencies)")
    return python


def installed_versions(name: str = "dgl", root: Path | None = None) -> dict:
    """What :func:`setup` recorded for peer ``name`` (``PeerMissing`` if not set up)."""
    require(name, root)
    return json.loads((_get(name).path(root) / VERSIONS_FILE).read_text())
