"""The cuda executor on a real GPU, in one prepared command: ``python -m bench gpu``
(``bench/gpu/run.sh`` on a lent machine, which first installs the carried wheels; the
wheels come from ``bench/gpu/wheels.sh``). :mod:`.study` says what it runs."""
