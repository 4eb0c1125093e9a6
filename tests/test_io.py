"""Crash-safe writes: a Ctrl-C during a write waits for it, an error leaves no trace."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from gblas_gnn._io import atomic_write, interrupts_deferred


def test_ctrl_c_during_a_write_is_delivered_after_it(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")

    def write(f):
        f.write(b"first half, ")
        os.kill(os.getpid(), signal.SIGINT)            # Ctrl-C in the middle of the write
        f.write(b"second half")

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, write)
    assert path.read_bytes() == b"first half, second half"
    assert os.listdir(tmp_path) == ["out.bin"]                 # no temporary file left
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_during_a_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")

    def write(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, write)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]


def test_no_interrupt_no_effect_and_other_threads_run_as_is(tmp_path):
    with interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    done = []
    thread = threading.Thread(target=lambda: atomic_write(tmp_path / "t.bin",
                                                          lambda f: done.append(f.write(b"x"))))
    thread.start()
    thread.join()
    assert done == [1] and (tmp_path / "t.bin").read_bytes() == b"x"
