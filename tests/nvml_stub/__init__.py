"""The stand-in ``libnvidia-ml.so.1`` (``libnvidia-ml.c``), compiled with ``cc`` at test time.

The real ``pynvml`` loads it as it loads the driver's library, so the tests run NVIDIA's
bindings unchanged against GPUs described in a state file (``State``). ``pynvml`` keeps the
loaded library and its function pointers for the life of the process, and glibc keeps the
first object with a soname: every test therefore runs its NVML part in a fresh interpreter
(``run_python``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import tool_missing

SOURCE = Path(__file__).with_name("libnvidia-ml.c")
STATE_ENV = "AUTOCLUSTERS_FAKE_NVML_STATE"
REPO = Path(__file__).resolve().parents[2]


def build(directory: Path) -> Path:
    """``directory``/libnvidia-ml.so.1, with that soname; fails (not skips) without ``cc``
    under ``AUTOCLUSTERS_REQUIRE_TOOLS=1``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        tool_missing("cc is needed to build the stand-in libnvidia-ml.so.1")
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "libnvidia-ml.so.1"
    # gnu11: a C23 default (GCC 15) would bind sscanf/strtoull to glibc 2.38's __isoc23_*
    # symbols, which the image's glibc (bookworm, 2.36) lacks when the test loads it there.
    subprocess.run([cc, "-std=gnu11", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wl,-soname,libnvidia-ml.so.1",
                    "-o", str(out), str(SOURCE)], check=True, capture_output=True, timeout=120)
    return out


@dataclass
class Gpu:
    bus: str
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    ecc_volatile: str = "0"
    ecc_aggregate: str = "0"
    remap: str = "0,0,0,0"  # correctable, uncorrectable, pending, failure; "-": not supported
    retired_pending: str = "0"
    links: str = "-"  # e.g. "1,1,0": link states; "-": no NVLink
    lost: bool = False

    def line(self) -> str:
        return (f"gpu bus={self.bus} uuid={self.uuid} name={self.name.replace(' ', '_')} "
                f"ecc_volatile={self.ecc_volatile} ecc_aggregate={self.ecc_aggregate} remap={self.remap} "
                f"retired_pending={self.retired_pending} links={self.links} lost={int(self.lost)}")


@dataclass
class State:
    gpus: list[Gpu] = field(default_factory=list)
    driver: str = "550.54.15"
    nvml: str = "12.550.54.15"
    init_error: int = 0
    count_error: int = 0

    def write(self, path: Path | str) -> None:
        path = Path(path)
        lines = [f"driver {self.driver}", f"nvml {self.nvml}", f"init_error {self.init_error}",
                 f"count_error {self.count_error}", *(g.line() for g in self.gpus)]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(path)


def gpus(n: int, **kw: Any) -> list[Gpu]:
    """``n`` healthy GPUs on buses 0x10, 0x20, ... with distinct UUIDs."""
    return [Gpu(f"00000000:{16 * (i + 1):02X}:00.0", f"GPU-{i:08x}-0000-0000-0000-000000000000", **kw)
            for i in range(n)]


def run_python(code: str, state: Path, *, ld_path: Path | None = None, timeout: float = 60) -> str:
    """``code`` in a fresh interpreter of this venv, the stand-in's state named in the
    environment, ``ld_path`` on the loader's path when given; returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env[STATE_ENV] = str(state)
    env["PYTHONPATH"] = str(REPO)
    if ld_path is not None:
        env["LD_LIBRARY_PATH"] = str(ld_path)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout
