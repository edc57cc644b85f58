"""Prints where a profiled controller's CPU went (``benchmarks/controller_overhead.py --profile FILE``):
the CPU per area of the code (each function's own time, by the file it is in), then the functions
with the most own time and the most inclusive time.

    python benchmarks/profile_summary.py FILE [--top 25] [--repairs N]

``--repairs`` divides by the number of repairs, so the table reads as milliseconds per repair.
"""

from __future__ import annotations

import argparse
import pstats
import re
from collections import Counter

# Areas by the file a function is in; first match wins.
AREAS = (
    ("kubernetes client (ApiClient, REST, config)", re.compile(r"site-packages/kubernetes/")),
    ("HTTP + TLS (urllib3, http.client, ssl, socket, email headers)",
     re.compile(r"urllib3/|http/client|/ssl\.py|/socket\.py|/email/|_ssl\.|_socket\.|selectors\.py")),
    ("JSON encode/decode", re.compile(r"/json/|orjson|'loads'|'dumps'|_json\.")),
    ("logging", re.compile(r"/logging/")),
    ("metrics (prometheus_client)", re.compile(r"prometheus_client/")),
    ("copies (copy module)", re.compile(r"/copy\.py")),
    ("events (kube/events.py)", re.compile(r"autoclusters/kube/events\.py")),
    ("client facade (kube/client.py, light.py, errors.py)", re.compile(r"autoclusters/kube/")),
    ("informers, fleet indexes, work queue",
     re.compile(r"informer\.py|fleet\.py|membership\.py|controller/queue\.py")),
    ("reconciler, state machine, actuator, providers", re.compile(r"autoclusters/(controller|providers)/")),
    ("other autoclusters", re.compile(r"autoclusters/")),
    ("threading, queue, dataclasses, enum, datetime",
     re.compile(r"threading\.py|/queue\.py|dataclasses|enum\.py|datetime|_thread|<string>")),
)


def label(func: tuple[str, int, str]) -> str:
    file, line, name = func
    for marker in ("site-packages/", "autoclusters/", "python3.11/"):
        if marker in file:
            file = file[file.index(marker) + (len(marker) if marker.endswith("python3.11/") else 0):]
            break
    return f"{name} ({file}:{line})" if line else name


def area(func: tuple[str, int, str]) -> str:
    key = f"{func[0]} '{func[2]}'"
    for name, pattern in AREAS:
        if pattern.search(key):
            return name
    return "other"


# Where the controller's CPU goes, by what it was doing: inclusive times of entry points
# (file suffix, function). Requests are counted once, where they are made.
ACTIVITIES = (
    ("API requests, all (Kube.request: encode, HTTP, TLS, decode)", (("kube/client.py", "request"),)),
    ("  of which the kubernetes library's request path", (("kubernetes/client/api_client.py", "call_api"),
                                                          ("kubernetes/client/api_client.py", "param_serialize"))),
    ("  of which events (background sender)", (("kube/events.py", "_write"),)),
    ("watch streams (read and decode events)", (("kube/client.py", "watch"),)),
    ("informer callbacks (fleet indexes, heartbeat filter)", (("controller/cache.py", "_on_node"),
                                                              ("controller/fleet.py", "_on_node"),
                                                              ("controller/fleet.py", "_on_record"),
                                                              ("controller/cache.py", "_on_record"),
                                                              ("controller/cache.py", "_on_pool"))),
    ("reconciles (decide, actuate), their requests included", (("controller/reconciler.py", "reconcile"),)),
    ("logging", (("logging/__init__.py", "callHandlers"),)),
)


def activities(stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]]) -> list[tuple[str, float]]:
    out = []
    for label, keys in ACTIVITIES:
        t = sum(ct for (file, _, name), (_, _, _, ct, _) in stats.items()
                if any(file.endswith(suffix) and name == fn for suffix, fn in keys))
        out.append((label, t))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--repairs", type=int, default=0, help="divide by this many repairs (ms per repair)")
    args = ap.parse_args()
    stats = pstats.Stats(args.profile).stats  # type: ignore[attr-defined]
    scale, unit = (1000 / args.repairs, "ms/repair") if args.repairs else (1.0, "s")
    total = sum(tt for (_, _, tt, _, _) in stats.values())
    areas: Counter[str] = Counter()
    for func, (_, _, tt, _, _) in stats.items():
        areas[area(func)] += tt
    print(f"own CPU time of all functions: {total * scale:.1f} {unit}")
    print("\nby activity (inclusive):")
    for name, t in activities(stats):
        print(f"  {t * scale:8.2f} {unit} {100 * t / total:5.1f}%  {name}")
    print("\nby area (own time):")
    for name, t in areas.most_common():
        print(f"  {t * scale:8.2f} {unit} {100 * t / total:5.1f}%  {name}")
    print(f"\ntop {args.top} by own time ({unit}, calls):")
    for func, (_, nc, tt, _, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[: args.top]:
        print(f"  {tt * scale:8.2f} {nc:8d}  {label(func)}")
    print(f"\ntop {args.top} by inclusive time ({unit}, calls):")
    for func, (_, nc, _, ct, _) in sorted(stats.items(), key=lambda kv: -kv[1][3])[: args.top]:
        print(f"  {ct * scale:8.2f} {nc:8d}  {label(func)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
