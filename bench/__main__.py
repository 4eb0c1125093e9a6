"""``python -m bench ...`` from the repository root."""

from . import main

raise SystemExit(main(reexec=True))
