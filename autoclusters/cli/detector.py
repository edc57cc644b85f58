"""``autoclusters detector run``: the node agent (DaemonSet) or a simulated fleet of nodes."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import threading
from collections.abc import Callable
from typing import Any

from autoclusters.api import DEFAULT_KERNEL_LOG_SOURCE, REPAIR_CODE_PATTERN, KernelLogSource
from autoclusters.cli._cluster import add_cluster_flags, connect, names_from_args
from autoclusters.cli._output import add_output_flag, print_json
from autoclusters.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CliError
from autoclusters.clock import SystemClock
from autoclusters.deploy.detector_settings import exporter_url_error
from autoclusters.deploy.nvml_reach import DEFAULT_HOST_ROOT, DEFAULT_SEARCH, HOST_MOUNT, LIBRARY, LOADER
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.writer import WriterConfig
from autoclusters.faults.catalog import CatalogError, load_catalog
from autoclusters.kube import Kube, KubeError
from autoclusters.names import Names

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    det = sub.add_parser("detector", help="the GPU fault detector agent")
    dsub = det.add_subparsers(dest="detector_command", metavar="COMMAND")
    run = dsub.add_parser("run", help="watch this node's GPUs (or simulated nodes) and write fault conditions")
    add_cluster_flags(run)
    run.add_argument("--node", default=os.environ.get("NODE_NAME"),
                     help="the node this agent runs on (default: $NODE_NAME)")
    run.add_argument("--simulate", action="store_true",
                     help="serve every node matching --node-selector from the simulated hardware in --spool")
    run.add_argument("--node-selector", default="autoclusters.io/simulated=true",
                     help="label selector of the simulated nodes (with --simulate)")
    run.add_argument("--spool", default=None, help="simulated hardware directory (with --simulate; default: "
                     "$AUTOCLUSTERS_DETECTOR_SPOOL or the dev cluster's state directory)")
    run.add_argument("--cluster", default=os.environ.get("AUTOCLUSTERS_CLUSTER", "dev"),
                     help="dev cluster name whose spool to use when --spool is not given (default: dev)")
    agent = AgentConfig()  # the agent's defaults (api.PERSISTENCE_WINDOW_SECONDS for the window)
    run.add_argument("--window", type=float, default=agent.window_s, metavar="SECONDS",
                     help=f"how long a fault must stay active before the condition turns True "
                          f"(default: {agent.window_s:g})")
    run.add_argument("--poll-interval", type=float, default=agent.poll_s, metavar="SECONDS",
                     help=f"kernel log poll interval (default: {agent.poll_s:g})")
    run.add_argument("--snapshot-interval", type=float, default=agent.snapshot_poll_s, metavar="SECONDS",
                     help=f"NVML, DCGM and InfiniBand poll interval (default: {agent.snapshot_poll_s:g})")
    run.add_argument("--heartbeat", type=float, default=agent.writer.heartbeat_s, metavar="SECONDS",
                     help=f"rewrite conditions at least this often (default: {agent.writer.heartbeat_s:g})")
    run.add_argument("--qps", type=float, default=agent.writer.qps,
                     help=f"condition writes per second, all nodes (default: {agent.writer.qps:g})")
    run.add_argument("--catalog", default=None, metavar="PATH", help="an operator's fault catalog (default: shipped)")
    run.add_argument("--condition-codes", default="", metavar="CLASS:CODE,...",
                     help="codes whose warnings raise the fault condition too (e.g. gpu:13), so a pool that names "
                          "them in spec.repairCodes repairs them; none by default (docs/operations.md)")
    run.add_argument("--kernel-log-source", choices=[s.value for s in KernelLogSource], default=None,
                     help="where to read the kernel log: /dev/kmsg, the host's systemd journal (the kernel's "
                          f"entries only) or a file (--kernel-log) (default: {DEFAULT_KERNEL_LOG_SOURCE.value}, "
                          "or file when --kernel-log is given)")
    run.add_argument("--kernel-log", default=None, metavar="PATH",
                     help="read this kernel log file (dmesg, journalctl or syslog lines) instead of /dev/kmsg")
    run.add_argument("--journal-root", default="/", metavar="DIR",
                     help="with --kernel-log-source journal: the OS root whose var/log/journal and "
                          "run/log/journal hold the journal (default: /; the DaemonSet mounts the host's under /host)")
    run.add_argument("--kmsg", default="/dev/kmsg", help="kernel log device (default: /dev/kmsg)")
    run.add_argument("--sys-infiniband", default="/sys/class/infiniband", metavar="PATH",
                     help="InfiniBand sysfs root (default: /sys/class/infiniband)")
    run.add_argument("--nvidia-proc", default="/proc/driver/nvidia/gpus", metavar="PATH",
                     help="the driver's GPU listing, for PCI -> index without NVML")
    run.add_argument("--gpu-map", default="", metavar="BUS=INDEX,...",
                     help="PCI bus id to GPU index map, used when NVML is absent (e.g. 0000:3b:00=3)")
    run.add_argument("--dcgm-command", default="dcgmi health -c -j", help="DCGM health command")
    run.add_argument("--dcgm-host", default=None, metavar="ADDR[:PORT]",
                     help="the DCGM hostengine to ask (passed as dcgmi --host; on GPU Operator clusters "
                          "nvidia-dcgm.gpu-operator.svc:5555). Default: none, the DCGM source is off")
    run.add_argument("--dcgm-exporter-url", default="", metavar="URL",
                     help="this node's dcgm-exporter metrics page (docs/detector.md says how to reach it). "
                          "Default: none, the dcgm-exporter source is off")
    run.add_argument("--no-nvml", action="store_true", help="do not use NVML even when the bindings are present")
    _nvml_flags(run)
    run.add_argument("--accept-injected-kmsg", action="store_true",
                     help="count Xid lines written to /dev/kmsg from user space (for fault drills with "
                          "'autoclusters inject-fault --dev-kmsg')")
    run.add_argument("--metrics-port", type=int, default=0,
                     help="serve Prometheus metrics on this port (default: 0, off)")
    run.add_argument("--metrics-address", default="0.0.0.0", help="address for --metrics-port (default: 0.0.0.0)")
    run.set_defaults(func=_run)
    inv = dsub.add_parser("inventory", help="read this node's GPUs through NVML once and print what NVML said")
    _nvml_flags(inv)
    inv.add_argument("--nvidia-proc", default="/proc/driver/nvidia/gpus", metavar="PATH",
                     help="the driver's GPU listing (NVML is expected when it lists GPUs)")
    inv.add_argument("--catalog", default=None, metavar="PATH", help="an operator's fault catalog (default: shipped)")
    add_output_flag(inv)
    inv.set_defaults(func=_inventory)
    det.set_defaults(func=lambda args: (det.print_help(), EXIT_USAGE)[1])


def _nvml_flags(parser: Any) -> None:
    parser.add_argument("--nvml-search", default=",".join(DEFAULT_SEARCH), metavar="WHERE,...",
                        help=f"where to look for {LIBRARY}, in order: '{LOADER}' (the loader's path) or host "
                             f"directories, each searched in its usual library directories "
                             f"(default: {','.join(DEFAULT_SEARCH)})")
    parser.add_argument("--host-root", default=DEFAULT_HOST_ROOT, metavar="PATH",
                        help="where the host's / is seen (the DaemonSet mounts it at "
                             f"{HOST_MOUNT}; default: {DEFAULT_HOST_ROOT})")


def _search(args: argparse.Namespace) -> tuple[str, ...]:
    search = tuple(filter(None, (p.strip() for p in args.nvml_search.split(","))))
    bad = [p for p in search if p != LOADER and not p.startswith("/")]
    if not search or bad:
        raise CliError(f"--nvml-search: expected '{LOADER}' or absolute directories, got {args.nvml_search!r}",
                       EXIT_USAGE)
    return search


def _inventory(args: argparse.Namespace) -> int:
    from autoclusters.detector.nvml import driver_lists_gpus, read_once
    from autoclusters.detector.nvml_inventory import render_text

    try:
        catalog = load_catalog(args.catalog)
    except (CatalogError, OSError) as e:
        raise CliError(f"cannot load the fault catalog: {e}", EXIT_USAGE) from e
    data = read_once(catalog, search=_search(args), host_root=args.host_root,
                     expect_gpus=driver_lists_gpus(args.nvidia_proc))
    if args.output == "json":
        print_json(data)
    else:
        state = data["state"]
        print(f"NVML source: {state['status']}" + (f" ({state['reason']})" if state["reason"] else "")
              + ("; the node has GPUs" if state["expected"] else ""))
        print(f"library: {data['library']}")
        if data["inventory"] is not None:
            print(render_text(data["inventory"]))
        poll = data["poll"]
        found = f"{len(poll['records'])} finding(s)"
        print(f"poll: {poll['error'] or found}")
        for r in poll["records"]:
            print(f"  {r['subject']}: {r['code']} ({r['severity']}) {r['detail']}".rstrip())
    return EXIT_OK if data["state"]["status"] == "on" else EXIT_FAILED


def _metrics(args: argparse.Namespace, text: Callable[[Any], str]) -> None:
    """Starts the metrics endpoint when asked; ``text`` gets ``metrics.render`` (imported only then)."""
    if args.metrics_port:
        from autoclusters.detector.detector_metrics import render, serve

        try:
            serve(args.metrics_port, lambda: text(render), args.metrics_address)
        except OSError as e:
            raise CliError(f"cannot serve metrics on {args.metrics_address}:{args.metrics_port}: {e}") from e


def _condition_codes(text: str) -> frozenset[str]:
    codes = frozenset(filter(None, (p.strip() for p in text.split(","))))
    for code in sorted(codes):
        if not re.match(REPAIR_CODE_PATTERN, code):
            raise CliError(f"--condition-codes: expected CLASS:CODE (e.g. gpu:13), got {code!r}", EXIT_USAGE)
    return codes


def _gpu_map(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        bus, _, idx = part.partition("=")
        if not idx.isdigit():
            raise CliError(f"--gpu-map: expected BUS=INDEX, got {part!r}", EXIT_USAGE)
        out[bus] = int(idx)
    return out


def _connect(args: argparse.Namespace) -> tuple[Kube, Names]:
    """The lean transport (the agent's memory budget); the full client for exec-plugin credentials."""
    from autoclusters.kube.light import load_light_kube

    try:
        return load_light_kube(args.kubeconfig, user_agent="autoclusters-detector"), names_from_args(args)
    except KubeError as e:
        if "exec/auth-provider" not in str(e):
            raise CliError(str(e), EXIT_UNREACHABLE) from e
    return connect(args, "autoclusters-detector")


def default_spool(cluster: str) -> str:
    from autoclusters.sim.hardware import SPOOL_ENV

    env = os.environ.get(SPOOL_ENV)
    if env:
        return env
    from autoclusters.devcluster.cluster import state_root

    return str(state_root() / cluster / "detector-spool")


def _kernel_log_source(args: argparse.Namespace) -> KernelLogSource | None:
    """The source the flags chose (None: a file when --kernel-log is given, else the default)."""
    source = KernelLogSource(args.kernel_log_source) if args.kernel_log_source else None
    if source == KernelLogSource.FILE and not args.kernel_log:
        raise CliError("--kernel-log-source file needs --kernel-log PATH", EXIT_USAGE)
    if source not in (None, KernelLogSource.FILE) and args.kernel_log:
        raise CliError(f"--kernel-log is read only with --kernel-log-source file, not {source}", EXIT_USAGE)
    return source


def _run(args: argparse.Namespace) -> int:
    if args.window < 0 or args.poll_interval <= 0 or args.snapshot_interval <= 0 or args.heartbeat <= 0:
        raise CliError("durations must be positive", EXIT_USAGE)
    _kernel_log_source(args)  # a contradiction of flags is a usage error before anything connects
    why = exporter_url_error(args.dcgm_exporter_url)
    if why:
        raise CliError(f"--dcgm-exporter-url: {why}", EXIT_USAGE)
    try:
        catalog = load_catalog(args.catalog)
    except (CatalogError, OSError) as e:
        raise CliError(f"cannot load the fault catalog: {e}", EXIT_USAGE) from e
    kube, names = _connect(args)
    clock = SystemClock()
    config = AgentConfig(window_s=args.window, poll_s=args.poll_interval, snapshot_poll_s=args.snapshot_interval,
                         writer=WriterConfig(heartbeat_s=args.heartbeat, qps=args.qps),
                         condition_codes=_condition_codes(args.condition_codes))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.simulate:
        from autoclusters.sim.fleet import SimulatedFleet

        spool = args.spool or default_spool(args.cluster)
        os.makedirs(spool, exist_ok=True)
        log.info("serving simulated nodes %s from %s (window %.1fs)", args.node_selector, spool, args.window)
        fleet = SimulatedFleet(kube, clock, catalog, names, spool, args.node_selector, config)
        _metrics(args, lambda render: render(fleet.agent_list(), fleet.writer, clock.monotonic(),
                                             informers=(fleet.nodes,), poll_errors=fleet.poll_errors))
        fleet.run(stop)
        return 0
    if not args.node:
        raise CliError("--node (or $NODE_NAME) is required unless --simulate", EXIT_USAGE)
    from autoclusters.detector.node import NodeLoop, NodePaths, build_agent

    paths = NodePaths(kmsg=args.kmsg, kernel_log_file=args.kernel_log, kernel_log_source=_kernel_log_source(args),
                      journal_root=args.journal_root, infiniband=args.sys_infiniband,
                      nvidia_proc=args.nvidia_proc, dcgm_command=tuple(args.dcgm_command.split()),
                      dcgm_host=args.dcgm_host or None, dcgm_exporter_url=args.dcgm_exporter_url,
                      gpu_map=_gpu_map(args.gpu_map), accept_user_kmsg=args.accept_injected_kmsg,
                      use_nvml=not args.no_nvml, nvml_search=_search(args), host_root=args.host_root)
    agent, writer, events = build_agent(args.node, kube, clock, catalog, names, config, paths)
    log.info("detector for node %s (window %.1fs)", args.node, args.window)
    loop = NodeLoop(agent, writer, events, config)
    _metrics(args, lambda render: render([agent], writer, clock.monotonic(), poll_errors=loop.poll_errors))
    loop.run(stop)
    return 0
