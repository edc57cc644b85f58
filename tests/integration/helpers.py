"""Small helpers shared by integration tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.25) -> T:
    """Polls ``fn`` until it returns something truthy; fails with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def kubectl_binary() -> str:
    """The kubectl the tests drive: $KUBECTL, the one built beside the control plane, or PATH."""
    env = os.environ.get("KUBECTL")
    if env:
        return env
    try:
        from autoclusters.devcluster.tools import cache_dir, versions

        built = cache_dir() / "bin" / f"kube-{versions()['KUBE_VERSION']}" / "kubectl"
        if built.exists():
            return str(built)
    except Exception:  # noqa: BLE001 - fall back to PATH
        pass
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("no kubectl: set $KUBECTL or run tools/build-tools.sh core")
    return found


def kubectl(kubeconfig: str, *args: str, check: bool = True, input: str | None = None) -> str:
    res = subprocess.run([kubectl_binary(), f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True,
                         input=input, timeout=60)
    if check and res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    return res.stdout
