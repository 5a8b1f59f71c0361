"""For tests of FIFOs where a file is expected: `with unblocking(fifo):` opens the FIFO's write end and
closes it after `seconds` if a reader is blocked on it, so code that wrongly reads the FIFO gets an
empty file and the test fails on its assertion instead of hanging the suite. (A SIGALRM handler does
not do this reliably: with polars' or torch's threads running, the signal may reach another thread,
and the read blocked in the main thread is never interrupted.)"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager


@contextmanager
def unblocking(*fifos, seconds: float = 20.0):
    done = threading.Event()

    def release():
        while not done.wait(seconds):
            for fifo in fifos:
                try:  # succeeds only while a reader has it open: then EOF for that reader
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
