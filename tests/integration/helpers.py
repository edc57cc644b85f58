"""Small helpers shared by integration tests."""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from autoclusters.clock import parse_iso

if TYPE_CHECKING:
    from autoclusters.detector.agent import NodeAgent
    from autoclusters.detector.writer import ConditionWriter
    from autoclusters.devcluster.handle import ClusterHandle
    from autoclusters.kube import Kube

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], *, timeout: float = 30, interval: float = 0.2) -> T:
    """Polls ``check`` until it returns something truthy and returns that; fails naming ``what``
    (and the last value seen) after ``timeout`` seconds. ``check`` runs at least once, and once
    more at the deadline, so a slow poll never fails a condition that did come true."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def heartbeat_after(what: str, condition: Callable[[], dict[str, Any] | None], after: datetime, *,
                    timeout: float = 30) -> dict[str, Any]:
    """The positive sign that a writer of conditions has looked since ``after``: the condition
    as it was rewritten with a ``lastHeartbeatTime`` past ``after`` (the stamp has second
    precision, so past means a whole second later: written no earlier than ``after``). A check
    that something did not happen by ``after`` then reads what that write says."""
    def fresh() -> dict[str, Any] | None:
        cond = condition()
        beat = (cond or {}).get("lastHeartbeatTime")
        return cond if beat and parse_time(beat).timestamp() >= math.floor(after.timestamp()) + 1 else None

    return wait_for(f"a heartbeat of {what} after {after.isoformat()}", fresh, timeout=timeout)


# The controller's debug line for each node reconcile (``Reconciler.reconcile``, under
# ``--verbose``), whole lines only, and the annotation a check touches to make a version the
# controller must read (``controller_decided``).
DECIDED = re.compile(r"node (\S+) reconciled \(read at resourceVersion (\S+)\): (.*)\n")
TOUCH_ANNOTATION = "tests.autoclusters.io/touched"


def controller_decided(kube: Kube, node: str, logs: Callable[[], Iterable[Path]], *, timeout: float = 30) -> str:
    """The positive sign that a controller has looked at ``node`` as it stands now, with every
    write made before this call, and decided: a harmless annotation is touched, and the debug
    line of a reconcile that read the node at or past that version is waited for in ``logs``
    (the controllers' log files, read from their size before the touch). Returns what the line
    says of the node's open repair ("no open repair", "record NAME PHASE", or "failed (ERROR):
    ..." for a reconcile whose write failed)."""
    offsets = {path: path.stat().st_size for path in logs() if path.exists()}
    touched = kube.patch_node(node, {"metadata": {"annotations": {TOUCH_ANNOTATION: secrets.token_hex(4)}}})
    version = int(touched["metadata"]["resourceVersion"])

    def line() -> str | None:
        for path in logs():
            with path.open("rb") as f:
                f.seek(offsets.get(path, 0))
                text = f.read().decode(errors="replace")
            for m in DECIDED.finditer(text):
                if m[1] == node and m[2].isdigit() and int(m[2]) >= version:
                    return m[3]
        return None

    return wait_for(f"the controller's decision on {node} at resourceVersion {version} or later", line,
                    timeout=timeout)


def controller_saw_gone(node: str, logs: Callable[[], Iterable[Path]], says: str = "no open repair", *,
                        timeout: float = 30) -> str:
    """The positive sign that a controller knows ``node`` is gone: the debug line of a reconcile
    of ``node`` that found no node in its cache (read at resourceVersion ``none``). A deleted
    node cannot be touched (``controller_decided``), but from that reconcile on every one reads
    it gone, so no repair can open for it: a check that none opened comes after. Waits for such
    a line that ``says`` this of the node's open repair (an earlier one may name the repair that
    was still ending), and returns it."""
    def line() -> str | None:
        for path in logs():
            if not path.exists():
                continue
            for m in DECIDED.finditer(path.read_text(errors="replace")):
                if m[1] == node and m[2] == "none" and m[3] == says:
                    return m[3]
        return None

    return wait_for(f"the controller's reconcile of {node} finding it gone ({says})", line, timeout=timeout)


def agent_writes_true_condition(cluster: ClusterHandle, agent: NodeAgent, writer: ConditionWriter, node: str,
                                ctype: str, *, timeout: float = 20) -> dict[str, Any]:
    """Polls a node agent (and flushes its writer) until ``node`` carries condition ``ctype``
    True on the API server; returns that condition."""
    def true_condition() -> dict[str, Any] | None:
        agent.poll()
        writer.step()
        writer.wait_idle()
        conds = cluster.kube.get_node(node)["status"].get("conditions") or []
        return next((c for c in conds if c["type"] == ctype and c["status"] == "True"), None)

    return wait_for(f"condition {ctype} written by the agent of {node}", true_condition, timeout=timeout)


def parse_time(value: str) -> datetime:
    """A timestamp the API wrote (RFC 3339); a missing or empty one fails the test."""
    parsed = parse_iso(value)
    if parsed is None:
        raise AssertionError(f"not a timestamp: {value!r}")
    return parsed


def parsed_objects(texts: Iterable[str]) -> list[str]:
    """Each object of these YAML texts as sorted JSON, sorted: an order-insensitive comparison of
    parsed objects (the Helm chart's and the kustomize components' renders against Python's)."""
    return sorted(json.dumps(o, sort_keys=True) for t in texts for o in yaml.safe_load_all(t) if o)


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


def kubectl(kubeconfig: str, *args: str, check: bool = True, input: str | None = None,
            timeout: float = 60) -> str:
    res = subprocess.run([kubectl_binary(), f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True,
                         input=input, timeout=timeout)
    if check and res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    return res.stdout


def upstream_crds(cluster: ClusterHandle, built: Callable[[], Path], api_path: str, what: str) -> None:
    """An upstream project's CRDs on the cluster: applied from the module ``tools/build-tools.sh``
    copied them from when it is there (the local cluster always); on another cluster they may
    already be installed (``api_path``, the group version's discovery path, answers). Neither:
    the test cannot run (a failure where the setup promised the tools)."""
    from autoclusters.devcluster.tools import ToolsMissing
    from autoclusters.kube import NotFound
    from tests.conftest import tool_missing

    try:
        crds = built()
    except ToolsMissing as e:
        try:
            cluster.kube.get(api_path)
        except NotFound:
            tool_missing(f"{what} CRDs are neither installed on the cluster nor built here: {e}")
        return
    cluster.apply([doc for path in sorted(crds.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
                   if doc and doc.get("kind") == "CustomResourceDefinition"])
