"""Runs ``autoclusters controller run`` under ``tracemalloc``, for the soak's leak hunt.

``python benchmarks/traced_controller.py SNAPSHOT_DIR FRAMES -- ARGS...`` starts tracing with
``FRAMES`` frames per allocation, then runs the CLI with ``ARGS``. Each SIGUSR2 writes a
snapshot (``SNAPSHOT_DIR/snapshot-N.pickle``, N counting from 1, written to a temporary name
and renamed, so a reader never sees half of one). ``benchmarks/controller_soak.py
--tracemalloc DIR`` sends the signals and prints the difference of the last two snapshots.

Not a way to run the controller in production: tracing slows every allocation and keeps
a traceback per live block.
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] != "--":
        print("usage: traced_controller.py SNAPSHOT_DIR FRAMES -- ARGS...", file=sys.stderr)
        return 2
    out, frames, args = Path(argv[0]), int(argv[1]), argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    taken = 0

    def snapshot(signum: int, frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
        path = out / f"snapshot-{taken}.pickle"
        tmp = path.with_suffix(".tmp")
        tracemalloc.take_snapshot().dump(str(tmp))
        os.replace(tmp, path)

    tracemalloc.start(frames)
    signal.signal(signal.SIGUSR2, snapshot)
    from autoclusters.cli.main import main as cli

    return int(cli(args) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
