"""What the checks read of the processes they start (console.py, prometheus.py)."""

import re
import threading
import time


def announced(proc, pattern, deadline_s, sink, what):
    """The first group of `pattern`'s first match in `proc`'s stderr: an address the process
    bound itself (port 0) and says in its output. Every line goes to `sink`, then and after (a
    thread reads on, so the process never blocks on a full pipe). RuntimeError when the process
    exits, or `deadline_s` passes, before saying it."""
    found = []

    def read():
        for line in proc.stderr:
            sink(line)
            m = re.search(pattern, line)
            if m and not found:
                found.append(m.group(1))

    threading.Thread(target=read, daemon=True).start()
    end = time.monotonic() + deadline_s
    while not found:
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode} first")
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not said within {deadline_s} s")
        time.sleep(0.2)
    return found[0]
