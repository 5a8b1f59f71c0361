"""Worker processes that exit when their parent is gone.

sdscore's worker pools (the runtime's `processes` executor, the pocketsphinx / Praat extractor
pools) are spawned ProcessPoolExecutor workers. When the parent ends normally it shuts them down,
but when it is killed (SIGKILL, the OOM killer) nothing tells them: they wait on their task queue
for ever, each holding its models in memory. `exit_with_parent()`, called in a worker's
initializer, starts a daemon thread that polls the parent's pid and ends the worker once the
parent is gone (the worker is then re-parented, so getppid() changes).
"""

from __future__ import annotations

import os
import threading

#: seconds between two looks at the parent
POLL_SECONDS = 1.0


def exit_with_parent(poll_seconds: float = POLL_SECONDS) -> None:
    """End this process (exit code 1, no cleanup: the work it held is lost with its parent) within
    about poll_seconds after the process that started it is gone."""
    parent = os.getppid()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(poll_seconds):
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="sdscore-parent-watch", daemon=True).start()
