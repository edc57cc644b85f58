"""CPU of one node watch event in the controller, live: the same path as
``benchmarks/node_watch_path.py`` (the watch stream's reading, the informer, the fleet's
callback), but fed by a real API server over TLS instead of bytes replayed from memory.

    python benchmarks/node_watch_live.py --kubeconfig $(autoclusters dev kubeconfig --name bench) \\
        [--nodes 100] [--events 3000] [--parallel 8] [--gather 0.02]

It creates ``--nodes`` simulated GPU nodes (``watchbench-N``, the local simulator's kwok
annotation: for the local cluster only), watches them with the controller's node informer
and ``Fleet._on_node``, and has a second process patch one annotation of them in turn,
``--events`` times (``--parallel`` patches in flight at once: a burst); then deletes the nodes.
``--gather`` is the informer's ``gather_seconds`` (the controller's ``--watch-gather-seconds``).
Prints the informer thread's CPU and wake-ups per event, the
share of it in ``Informer._apply`` (the store and the fleet's callback), the rest (reading the
stream: TLS, the socket, the chunked framing, decoding, waking the thread), and the decoding
of one such event from memory for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from autoclusters.controller.cache import Fleet
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube.client import Kube
from autoclusters.kube.errors import Conflict, NotFound
from autoclusters.kube.informer import Informer
from autoclusters.kube.loader import load_kube
from autoclusters.names import Names
from autoclusters.sim import nodes as sim

LABEL = "autoclusters.io/watch-bench"
POOL = "watchbench"


def thread_cpu(native_id: int) -> float:
    """Seconds of CPU (user + system) of one thread of this process."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_wakeups(native_id: int) -> int:
    """Times one thread of this process gave up the CPU to wait (its voluntary context switches):
    each is a wake-up when what it waited for came."""
    with open(f"/proc/self/task/{native_id}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def patch_in_turn(kube: Kube, nodes: int, events: int, parallel: int = 1) -> None:
    def one(i: int) -> None:
        kube.patch(f"/api/v1/nodes/watchbench-{i % nodes}", {"metadata": {"annotations": {LABEL: str(i)}}})

    if parallel <= 1:
        for i in range(events):
            one(i)
        return
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(events)))


def create(kube: Kube, names: Names, nodes: int) -> None:
    for i in range(nodes):
        node = sim.gpu_node_manifest(f"watchbench-{i}", POOL, names)
        node["metadata"]["labels"][LABEL] = "true"
        with contextlib.suppress(Conflict):  # left by an earlier run: used as it is
            kube.create("/api/v1/nodes", node)


def delete(kube: Kube, nodes: int) -> None:
    for i in range(nodes):
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/nodes/watchbench-{i}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--parallel", type=int, default=1,
                    help="patches in flight at once: 1 sends one event at a time; more, a burst (as a repair "
                         "wave's node changes come)")
    ap.add_argument("--gather", type=float, default=0.0,
                    help="the informer's gather_seconds (Kube.watch): a burst's events read together")
    ap.add_argument("--patcher", action="store_true", help=argparse.SUPPRESS)  # the second process
    args = ap.parse_args()
    kube = load_kube(args.kubeconfig)
    if args.patcher:
        patch_in_turn(kube, args.nodes, args.events, args.parallel)
        return 0

    names = Names()
    create(kube, names, args.nodes)
    fleet = Fleet(kube, names, load_catalog(), lambda _key: None)
    informer = Informer(kube, "/api/v1/nodes", fleet._on_node, label_selector=f"{LABEL}=true", name="nodes",
                        gather_seconds=args.gather)
    applied = {"n": 0, "cpu": 0.0}
    apply = informer._apply

    def timed_apply(event: Any) -> str:
        t = time.thread_time()
        try:
            return apply(event)
        finally:
            applied["cpu"] += time.thread_time() - t
            applied["n"] += 1

    informer._apply = timed_apply  # type: ignore[method-assign]
    try:
        informer.start()
        if not informer.synced.wait(60):
            print("the node informer did not list within 60 s", file=sys.stderr)
            return 1
        time.sleep(2)  # the creations' own events
        thread = next(t for t in threading.enumerate() if t.name == "informer-nodes")
        assert thread.native_id is not None
        sample = orjson.dumps({"type": "MODIFIED", "object": kube.get("/api/v1/nodes/watchbench-0")}) + b"\n"
        n0, a0, c0 = applied["n"], applied["cpu"], thread_cpu(thread.native_id)
        v0 = thread_wakeups(thread.native_id)
        w0 = time.monotonic()
        subprocess.run([sys.executable, os.path.abspath(__file__), "--kubeconfig", args.kubeconfig,
                        "--nodes", str(args.nodes), "--events", str(args.events), "--parallel", str(args.parallel),
                        "--patcher"], check=True)
        deadline = time.monotonic() + 30
        while applied["n"] - n0 < args.events and time.monotonic() < deadline:
            time.sleep(0.1)
        wall = time.monotonic() - w0
        wakeups = thread_wakeups(thread.native_id) - v0
        n, a, c = applied["n"] - n0, applied["cpu"] - a0, thread_cpu(thread.native_id) - c0
    finally:
        informer.stop()
        delete(kube, args.nodes)
    t = time.thread_time()
    for _ in range(1000):
        orjson.loads(sample)
    decode = (time.thread_time() - t) / 1000
    per = c / max(n, 1)
    print(f"{n} node watch events of {len(sample)} bytes ({args.events} patches of {args.nodes} nodes, "
          f"{args.parallel} at a time; gather {args.gather * 1000:.0f} ms); {wall:.1f} s")
    print(f"  {per * 1e6:7.1f} µs  the informer thread's CPU per event")
    print(f"  {wakeups / max(n, 1):7.2f}     wake-ups of the thread per event")
    print(f"  {a / max(n, 1) * 1e6:7.1f} µs    of it in Informer._apply (the store, Fleet._on_node)")
    print(f"  {(c - a) / max(n, 1) * 1e6:7.1f} µs    the rest: reading the stream (TLS, socket, chunks), decoding, "
          f"waking the thread")
    print(f"  {decode * 1e6:7.1f} µs  decoding one such event from memory (orjson.loads), for comparison")
    return 0


if __name__ == "__main__":
    sys.exit(main())
