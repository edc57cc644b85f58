"""Runs a Python module with every thread under cProfile, timed by each thread's own CPU clock, and
writes the CPU spent between two signals: SIGUSR1 marks the start of the window, SIGUSR2 its end
(the profile is written then, to OUT, in the format ``pstats`` reads).

    python benchmarks/profiled.py OUT -m autoclusters.cli.main controller run ...

``benchmarks/controller_overhead.py --profile OUT`` starts the controller this way and signals it
around the repairs; ``benchmarks/profile_summary.py OUT`` prints where the CPU went. The
profiler slows the process (each call is timed), so the benchmark's latency numbers of a profiled
run are not comparable with an unprofiled one; the shares of the CPU are what it is for.
"""

from __future__ import annotations

import cProfile
import marshal
import os
import runpy
import signal
import sys
import threading
import time
from typing import Any

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()
_start: dict[Any, tuple[Any, ...]] = {}


def _profiled() -> cProfile.Profile:
    prof = cProfile.Profile(time.thread_time)  # CPU time of the thread, not wall time: waits cost nothing
    with _lock:
        _profiles.append(prof)
    return prof


def _snapshot() -> dict[Any, tuple[Any, ...]]:
    """All threads' stats merged: {func: (cc, nc, tt, ct, callers)}."""
    merged: dict[Any, list[Any]] = {}
    with _lock:
        profiles = list(_profiles)
    for prof in profiles:
        prof.snapshot_stats()  # reads the counters without stopping the profiler
        for func, (cc, nc, tt, ct, callers) in prof.stats.items():
            m = merged.setdefault(func, [0, 0, 0.0, 0.0, {}])
            m[0] += cc
            m[1] += nc
            m[2] += tt
            m[3] += ct
            for caller, c in callers.items():
                prev = m[4].get(caller)
                m[4][caller] = c if prev is None else tuple(a + b for a, b in zip(prev, c, strict=True))
    return {f: tuple(v) for f, v in merged.items()}


def _minus(after: dict[Any, tuple[Any, ...]], before: dict[Any, tuple[Any, ...]]) -> dict[Any, tuple[Any, ...]]:
    out = {}
    for func, (cc, nc, tt, ct, callers) in after.items():
        b = before.get(func)
        if b is not None:
            cc, nc, tt, ct = cc - b[0], nc - b[1], tt - b[2], ct - b[3]
            callers = {c: tuple(x - y for x, y in zip(v, b[4].get(c, (0,) * len(v)), strict=True))
                       for c, v in callers.items()}
            callers = {c: v for c, v in callers.items() if v[0] or v[1]}
        if nc or cc:
            out[func] = (cc, nc, tt, ct, callers)
    return out


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit("usage: profiled.py OUT -m MODULE [ARGS...]")
    out, module = sys.argv[1], sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this script's folder

    run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        prof = _profiled()
        prof.enable()
        try:
            run(self)
        finally:
            prof.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]

    # The handlers run in the main thread: its profiler is paused meanwhile, so the snapshots'
    # own cost is not in the profile.
    def window_start(*_: Any) -> None:
        main_prof.disable()
        _start.clear()
        _start.update(_snapshot())
        main_prof.enable()

    def window_end(*_: Any) -> None:
        main_prof.disable()
        with open(out + ".part", "wb") as f:
            marshal.dump(_minus(_snapshot(), _start), f)
        os.replace(out + ".part", out)  # whole, or not there
        main_prof.enable()

    main_prof = _profiled()
    signal.signal(signal.SIGUSR1, window_start)
    signal.signal(signal.SIGUSR2, window_end)
    main_prof.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        main_prof.disable()


if __name__ == "__main__":
    main()
