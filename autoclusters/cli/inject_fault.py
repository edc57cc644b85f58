"""``autoclusters inject-fault NODE ...``: make a node's hardware show a fault.

The fault goes in where the detector reads it, never into the node condition: on a
simulated node into its spool (a driver line in its kernel log, a failed DCGM watch, an
InfiniBand port that went down); on a real node, with ``--dev-kmsg``, as a driver line
written to ``/dev/kmsg`` (the agent counts such user-space lines only when started with
``--accept-injected-kmsg``). The detector then takes the whole path: window, condition.

Where the spool is: ``--spool``, else ``$AUTOCLUSTERS_DETECTOR_SPOOL``, else
``<dev cluster state dir>/<--cluster>/detector-spool`` (what ``detector run --simulate``
uses by default).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from autoclusters.cli._output import add_output_flag, print_json
from autoclusters.cli.exit_codes import EXIT_USAGE, CliError
from autoclusters.detector.kernel_log import format_sxid_line, format_xid_line
from autoclusters.detector.pci import SIMULATED_GPU_BUS_IDS
from autoclusters.faults.catalog import FaultClass, load_catalog


def register(sub: Any) -> None:
    p = sub.add_parser("inject-fault", help="make a node's (simulated) hardware show a GPU or interconnect fault")
    p.add_argument("node", metavar="NODE")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--xid", type=int, help="a GPU Xid code (needs --gpu)")
    kind.add_argument("--sxid", type=int, help="an NVSwitch SXid code")
    kind.add_argument("--dcgm", metavar="CODE", help="a DCGM failure, e.g. DCGM_FR_NVLINK_DOWN (needs --gpu)")
    kind.add_argument("--hca", metavar="HCA", help="take an InfiniBand port down, e.g. mlx5_0")
    kind.add_argument("--clear", action="store_true",
                      help="healthy again: DCGM and ports recover and no persistent fault returns at the next "
                           "boot (kernel log faults end with the reboot)")
    p.add_argument("--gpu", type=int, help="GPU index (0-7)")
    p.add_argument("--port", type=int, default=1, help="InfiniBand port (default: 1)")
    p.add_argument("--switch", type=int, default=0, help="NVSwitch number for --sxid (default: 0)")
    p.add_argument("--non-fatal", action="store_true", help="--sxid: log it as Non-fatal")
    p.add_argument("--text", default=None, help="the driver's description text (default: the catalog name)")
    p.add_argument("--persistent", action="store_true",
                   help="broken hardware: the fault comes back after every reboot until --clear")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--spool", default=None, help="simulated hardware directory")
    where.add_argument("--dev-kmsg", action="store_true",
                       help="real node: write the driver line to /dev/kmsg (root; --xid and --sxid only)")
    p.add_argument("--cluster", default=os.environ.get("AUTOCLUSTERS_CLUSTER", "dev"),
                   help="dev cluster whose spool to use when --spool is not given (default: dev)")
    add_output_flag(p)
    p.set_defaults(func=_inject)


def _fault(args: argparse.Namespace) -> dict[str, Any]:
    if args.xid is not None:
        if args.gpu is None or not 0 <= args.gpu < len(SIMULATED_GPU_BUS_IDS):
            raise CliError("--xid needs --gpu 0..7", EXIT_USAGE)
        if args.xid < 0:
            raise CliError("--xid must be a positive code", EXIT_USAGE)
        return {"kind": "xid", "code": args.xid, "gpu": args.gpu, "text": args.text}
    if args.sxid is not None:
        if args.sxid < 0:
            raise CliError("--sxid must be a positive code", EXIT_USAGE)
        return {"kind": "sxid", "code": args.sxid, "switch": args.switch, "fatal": not args.non_fatal,
                "text": args.text}
    if args.dcgm is not None:
        if args.gpu is None or args.gpu < 0:
            raise CliError("--dcgm needs --gpu", EXIT_USAGE)
        if not args.dcgm.startswith("DCGM_FR_"):
            raise CliError("--dcgm expects a DCGM failure code such as DCGM_FR_NVLINK_DOWN", EXIT_USAGE)
        return {"kind": "dcgm", "code": args.dcgm, "gpu": args.gpu, "text": args.text}
    if not args.hca or "/" in args.hca or args.hca.startswith("."):
        raise CliError("--hca expects an HCA name such as mlx5_0", EXIT_USAGE)
    return {"kind": "hca", "hca": args.hca, "port": args.port}


def _dev_kmsg(fault: dict[str, Any]) -> str:
    catalog = load_catalog()
    if fault["kind"] == "xid":
        entry = catalog.entry_or_unknown(FaultClass.GPU, fault["code"])
        line = format_xid_line(SIMULATED_GPU_BUS_IDS[fault["gpu"]], fault["code"], fault["text"] or f"{entry.name}.")
    elif fault["kind"] == "sxid":
        entry = catalog.entry_or_unknown(FaultClass.NVSWITCH, fault["code"])
        line = format_sxid_line(fault["switch"], "0000:c4:00", fault["code"], fault["text"] or entry.name,
                                fatal=fault["fatal"])
    else:
        raise CliError("--dev-kmsg takes --xid or --sxid", EXIT_USAGE)
    try:
        with open("/dev/kmsg", "w") as f:
            f.write(f"<3>{line}\n")
    except OSError as e:
        raise CliError(f"cannot write /dev/kmsg: {e.strerror} (run as root on the node)") from e
    return line


def _inject(args: argparse.Namespace) -> int:
    from autoclusters.cli.detector import default_spool
    from autoclusters.sim.hardware import SimulatedHardware

    if args.dev_kmsg:
        if args.clear or args.persistent:
            raise CliError("--dev-kmsg cannot --clear or --persistent: a real node's log is the kernel's", EXIT_USAGE)
        written = _dev_kmsg(_fault(args))
        spool = "/dev/kmsg"
    else:
        spool = args.spool or default_spool(args.cluster)
        try:
            hw = SimulatedHardware(spool, args.node)
        except ValueError as e:
            raise CliError(str(e), EXIT_USAGE) from e
        if args.clear:
            hw.clear()
            written = "cleared"
        else:
            try:
                written = hw.inject(_fault(args), load_catalog(), persistent=args.persistent)
            except ValueError as e:
                raise CliError(str(e), EXIT_USAGE) from e
    if args.output == "json":
        print_json({"node": args.node, "spool": spool, "written": written, "persistent": bool(args.persistent)})
    else:
        print(f"{args.node}: {written}")
    return 0
