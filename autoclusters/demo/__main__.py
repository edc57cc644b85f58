"""``python -m autoclusters.demo`` (``make demo``): see the module docstring of the package."""

from __future__ import annotations

import argparse
import os
import sys
import time

from autoclusters.api import ConsentMode, Phase
from autoclusters.cli._output import print_table
from autoclusters.clock import parse_iso
from autoclusters.demo import karpenter_replacement as kdemo
from autoclusters.demo import story
from autoclusters.demo.demo_stack import DemoStack
from autoclusters.demo.runtime import Runtime
from autoclusters.demo.story import Result, say
from autoclusters.deploy.workloads import CONTROLLER, EVENT_SOURCE_ENV
from autoclusters.devcluster.cluster import LocalCluster
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.processes import free_port
from autoclusters.names import (
    DEFAULT_DOMAIN,
    DEFAULT_PREFIX,
    EVENT_SUCCEEDED,
    REASON_XID,
    REFERENCE_EVENT_SOURCE,
    NameError_,
    Names,
    event_source_error,
)

POOL = "a100"


def parse(argv: list[str] | None) -> argparse.Namespace:
    try:
        env = Names.from_env()
    except NameError_:
        env = Names()
    p = argparse.ArgumentParser(prog="make demo", description=__doc__)
    p.add_argument("--cluster", default="demo", help="local cluster name (default: demo)")
    p.add_argument("--window", type=float, default=5.0,
                   help="fault persistence window in seconds (the contract's default is 60; shortened for the demo)")
    p.add_argument("--reset-seconds", type=float, default=6.0, help="how long the simulated VM reset takes")
    p.add_argument("--keep", action="store_true", help="leave the cluster and runtime running at the end")
    p.add_argument("--karpenter", action="store_true",
                   help="add a replacement through Karpenter (built by tools/build-tools.sh karpenter)")
    p.add_argument("--domain", default=env.domain,
                   help=f"label domain (default: $AUTOCLUSTERS_DOMAIN or {DEFAULT_DOMAIN}; crusoe.ai: the reference)")
    p.add_argument("--condition-prefix", default=env.prefix,
                   help=f"condition prefix (default: $AUTOCLUSTERS_CONDITION_PREFIX or {DEFAULT_PREFIX})")
    p.add_argument("--event-source", default=os.environ.get(EVENT_SOURCE_ENV) or CONTROLLER,
                   help=f"the controller's event source (default: ${EVENT_SOURCE_ENV} or {CONTROLLER}; "
                        f"{REFERENCE_EVENT_SOURCE}: the reference)")
    args = p.parse_args(argv)
    try:
        args.names = Names(args.domain, args.condition_prefix)
    except NameError_ as e:
        p.error(str(e))
    why = event_source_error(args.event_source)
    if why:
        p.error(why)
    return args


def banner(step: int, total: int, text: str) -> None:
    say()
    say(f"[{step}/{total}] {text}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    t_start = time.monotonic()
    total = 8 if args.karpenter else 7
    cluster = LocalCluster(args.cluster)
    banner(1, total, f"Starting the local control plane '{args.cluster}' "
                     "(etcd, kube-apiserver, controller-manager, scheduler, kwok, OPA)")
    cluster.up(progress=lambda m: say(f"    {m}"))
    handle = ClusterHandle(str(cluster.kubeconfig), local=True, opa_url=cluster.opa_url, state_dir=cluster.dir,
                           names=args.names)
    runtime = Runtime(handle, logs=cluster.logs, spool=cluster.dir / "detector-spool", cluster=cluster,
                      event_source=args.event_source)
    results: list[Result] = []
    try:
        banner(2, total, f"pulumi up: CRDs, RBAC, detector, controller, admission policy, and pool '{POOL}' "
                         "(2 x 8x A100, consent mode auto)")
        webhook_port = free_port()
        say(f"    names: domain {args.names.domain}, condition prefix {args.names.prefix}, "
            f"event source {args.event_source}")
        stack = DemoStack(handle, cluster.dir / "pulumi", pool=POOL, webhook_port=webhook_port,
                          event_source=args.event_source)
        stack.up(consent_mode=ConsentMode.AUTO, progress=lambda m: say(f"    {m}"))
        nodes = sorted(n["metadata"]["name"] for n in handle.kube.list_nodes(f"{handle.names.pool_label}={POOL}"))
        if len(nodes) < 2:
            raise RuntimeError(f"pool {POOL} has {len(nodes)} nodes after pulumi up; expected 2")
        say(f"    pool {POOL}: {', '.join(nodes)} (Ready; label {handle.names.pool_label}={POOL})")

        banner(3, total, "Starting the runtime on the host under the stack's service accounts")
        runtime.spool.mkdir(parents=True, exist_ok=True)
        runtime.start_webhook(port=webhook_port, opa_url=str(cluster.opa_url),
                              tls=stack.webhook_tls(cluster.dir / "webhook-tls"))
        runtime.start_detectors(nodes, window_seconds=args.window)
        runtime.start_controller(sim_reset_seconds=args.reset_seconds, sim_replace_seconds=args.reset_seconds * 2)
        say(f"    controller; one detector per node (token bound to its node; simulated hardware in {runtime.spool});"
            f" webhook on 127.0.0.1:{webhook_port}")
        say(f"    logs: {cluster.logs}/{{controller,detector-<node>,webhook}}.log")

        banner(4, total, "A training job: one 8-GPU worker per node, checkpointing on SIGTERM, PDB maxUnavailable 1")
        handle.apply(story.training_workload(handle.names.pool_label, POOL, replicas=2), field_manager="demo")
        for p in story.wait_running(handle, 2):
            say(f"    {p['metadata']['name']} Running on {p['spec']['nodeName']}")

        banner(5, total, f"Consent mode auto: Xid 79 (GPU fell off the bus) on GPU 3 of {nodes[0]}")
        results.append(run_scenario(handle, runtime, args, ConsentMode.AUTO, nodes[0], stack=None))

        banner(6, total, f"Consent mode propose (changed in the stack config, pulumi up): Xid 79 on {nodes[1]}")
        stack.up(consent_mode=ConsentMode.PROPOSE, progress=lambda m: say(f"    {m}"))
        story.wait_running(handle, 2)
        results.append(run_scenario(handle, runtime, args, ConsentMode.PROPOSE, nodes[1], stack=stack))

        if args.karpenter:
            banner(7, total, f"Replacement through Karpenter: pool '{kdemo.POOL}' of Karpenter's nodes, "
                             "a DCGM row-remapping failure (a replace fault) on one of them")
            knodes = kdemo.setup(cluster, handle, lambda m: say(f"    {m}"))
            runtime.start_detectors(knodes, window_seconds=args.window, hostnames=kdemo.hostnames(handle, knodes))
            results.append(kdemo.run(handle, runtime, args, knodes[0]))
    except Exception as e:  # noqa: BLE001 - the demo reports any failure and exits non-zero
        say(f"\nDEMO FAILED: {type(e).__name__}: {e}")
        say(f"    component logs: {cluster.logs}")
        results.append(Result("error", "-", "-", "-", outcome=f"{type(e).__name__}"))
    finally:
        banner(total, total, "Summary")
        summary(results, time.monotonic() - t_start)
        if args.keep:
            say(f"\nLeft running (--keep). KUBECONFIG={cluster.kubeconfig}; stop with: "
                f"autoclusters dev down --name {args.cluster}")
        else:
            runtime.stop()
            failed = not results or not all(r.ok for r in results)
            cluster.down(keep_logs=failed)
            if failed:
                say(f"Cluster stopped; its logs are kept in {cluster.logs}")
    return 0 if results and all(r.ok for r in results) else 1


def run_scenario(handle: ClusterHandle, runtime: Runtime, args: argparse.Namespace, mode: str, node: str,
                 stack: object | None) -> Result:
    names = handle.names
    result = Result(mode, node, "Xid 79 on GPU 3", mode)
    before = handle.kube.get_node(node)["status"]["nodeInfo"]["bootID"]
    since = story.now().replace(microsecond=0)  # API timestamps have second precision
    say(f"    $ {story.inject(args.cluster, str(runtime.spool), node, xid=79, gpu=3)}")
    say(f"    (the detector reads the driver line from the node's kernel log; the fault must stay "
        f"{args.window:g}s before it counts — 60s by default)")
    cond = story.wait_condition(handle, node, "True", timeout=args.window + 30)
    t_detect = ((parse_iso(cond.get("lastTransitionTime")) or story.now()) - since).total_seconds()
    say(f"    +{t_detect:6.1f}s  {names.gpu_condition}=True  {cond['reason']}: {cond['message']}")
    if cond["reason"] != REASON_XID:
        raise RuntimeError(f"unexpected reason {cond['reason']}")

    def on_phase(rec: story.Repair) -> None:
        if rec.phase == Phase.AWAITING_APPROVAL:
            n = handle.kube.get_node(node)
            labels = n["metadata"].get("labels") or {}
            taints = [t["key"] + ":" + t["effect"] for t in (n.get("spec") or {}).get("taints") or []]
            say(f"             node labels: {names.maintenance_required}={labels.get(names.maintenance_required)}; "
                f"taints: {', '.join(taints)}; workers still running: {', '.join(story.pods_on(handle, node))}")
            say("             an operator reads the condition, lets the job checkpoint, then approves:")
            cmd, out = story.approve(handle.kubeconfig, node, names)
            say(f"    $ {cmd}")
            for line in out.splitlines():
                say(f"      {line}")

    rec = story.follow(handle, node, since, timeout=240, check=runtime.check, on_phase=on_phase)
    result.action = rec.action or "-"
    result.outcome = rec.outcome or rec.phase
    result.phases = {"Detection": t_detect, **story.phase_durations(rec)}
    result.replacement = rec.replacement_node
    if rec.phase != "Succeeded":
        say(f"    repair ended in {rec.phase}: {rec.message}")
        story.show_events(handle, node, args.event_source)
        return result
    final = rec.replacement_node or node
    n = story.wait_back_in_service(handle, final)
    result.total = (story.now() - since).total_seconds()
    boot = n["status"]["nodeInfo"]["bootID"]
    say(f"    {final} is back in service: Ready, uncordoned, labels and taint removed, "
        f"{names.gpu_condition}={(story.condition(n, names.gpu_condition) or {}).get('status')} "
        f"(boot id {before[:8]} -> {boot[:8]})")
    story.wait_for_event(handle, node, args.event_source, EVENT_SUCCEEDED, since)
    story.show_events(handle, node, args.event_source)
    story.wait_running(handle, 2)
    say("    both training workers Running again")
    return result


def summary(results: list[Result], elapsed: float) -> None:
    phases = ["Detection", *(p.value for p in (Phase.AWAITING_APPROVAL, Phase.SCHEDULED, Phase.DRAINING, Phase.ACTING,
                                                Phase.VERIFYING))]
    rows = []
    for r in results:
        rows.append([r.scenario, r.node, r.fault, r.consent_mode, r.action,
                     *[f"{r.phases[p]:.1f}s" if p in r.phases else "-" for p in phases],
                     f"{r.total:.1f}s" if r.total else "-", r.outcome])
    print_table(["SCENARIO", "NODE", "FAULT", "MODE", "ACTION", "DETECT", "APPROVAL", "SCHEDULED", "DRAIN", "ACT",
                 "VERIFY", "TOTAL", "OUTCOME"], rows, out=sys.stdout)
    ok = results and all(r.ok for r in results)
    say(f"\n{'Every repair succeeded' if ok else 'A repair did not succeed'} (demo took {elapsed:.0f}s).")


if __name__ == "__main__":
    sys.exit(main())
