"""The in-cluster paths, from the built image: the controller, the detector and the webhook
run from the image's root filesystem under runc, configured from the same Deployment and
DaemonSet specs ``pulumi up`` and ``manifests/`` deploy, with only what a pod gets (the
service account's token and CA at the standard path, ``KUBERNETES_SERVICE_HOST``/``PORT``,
its volumes). Nothing here runs the host's virtualenv (tests/integration/image_support.py).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import re
import secrets
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters import __version__, api
from autoclusters.certificates import make_ca, make_serving
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.deploy import (
    CONTROLLER_SERVICE_ACCOUNT,
    DEFAULT_IMAGE,
    DETECTOR_SERVICE_ACCOUNT,
    WEBHOOK_SERVICE_ACCOUNT,
    policy_bundle,
    workloads,
)
from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.crds import crds
from autoclusters.deploy.detector import detector_rbac
from autoclusters.deploy.nvml_reach import DEFAULT_SEARCH, HOST_ROOT_VOLUME, LOADER
from autoclusters.detector.kernel_log import format_xid_line
from autoclusters.detector.nvml import driver_lists_gpus
from autoclusters.detector.nvml_library import candidates
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from autoclusters.sim import nodes as simnodes
from tests import nvml_stub
from tests.integration.helpers import wait_for
from tests.integration.image_support import Image, PodContainer, built_image, free_port, replace_flag
from tests.nvml_stub import State
from tests.nvml_stub import gpus as stub_gpus

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "examples" / "policy-samples" / "admission"
# The controller's durations, shortened through its environment (AUTOCLUSTERS_CONTROLLER_*), as
# an operator would set them on the Deployment.
CONTROLLER_ENV = {
    "LEASE_SECONDS": "4", "RENEW_DEADLINE_SECONDS": "3", "RETRY_PERIOD_SECONDS": "0.5", "POLL_SECONDS": "0.3",
    "HOLD_RECHECK_SECONDS": "0.5", "VERIFY_TIMEOUT_SECONDS": "20", "SIM_RESET_SECONDS": "1",
    "SIM_REPLACE_SECONDS": "1", "RESYNC_SECONDS": "20",
}


@pytest.fixture(scope="module")
def image() -> Image:
    return built_image()


@pytest.fixture()
def pods(tmp_path: Path) -> Iterator[list[PodContainer]]:
    started: list[PodContainer] = []
    yield started
    for c in started:
        c.stop()
        if os.environ.get("AUTOCLUSTERS_TEST_SHOW_LOGS"):
            print(f"--- {c.id}\n{c.log()[-4000:]}")


def _start(pods: list[PodContainer], cluster: ClusterHandle, image: Image, obj: dict[str, Any], container: str,
           tmp_path: Path, namespace: str, token: str, **kw: Any) -> PodContainer:
    host, port, ca = cluster.api_server()
    c = PodContainer(image, obj["spec"]["template"]["spec"], container, workdir=tmp_path / "pods",
                     namespace=namespace, token=token, ca_pem=ca, api_host=host, api_port=port, **kw)
    pods.append(c)
    return c


def _condition(kube: Kube, node: str, ctype: str) -> dict[str, Any] | None:
    conds = (kube.get_node(node).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == ctype), None)


def test_the_image_is_the_cli_as_a_non_root_user_without_pulumi(image: Image) -> None:
    proc = image.spec["process"]
    assert proc["args"] == ["/opt/autoclusters/bin/autoclusters"]
    assert proc["user"]["uid"] == 65532
    site = next((image.rootfs / "opt" / "autoclusters" / "lib").glob("python3*/site-packages"))
    assert (site / "autoclusters").is_dir() and (site / "kubernetes").is_dir()
    assert not (site / "pulumi").exists() and not (site / "pulumi_kubernetes").exists()
    assert not (site / "pip").exists() and not (site / "pytest").exists()
    assert (site / "autoclusters" / "policies" / "admission" / "src.rego").is_file()  # the Rego travels in the wheel
    assert image.archive.name == f"autoclusters-{__version__}.oci.tar"
    assert DEFAULT_IMAGE.endswith(f":{__version__}")


def _printed_json(log: str) -> Any:
    """The JSON document a command printed into a container's log (stdout and stderr in one
    file: the log lines before or after it are not part of it)."""
    return json.JSONDecoder().raw_decode(log, log.index("{\n"))[0]


def _host_nvml() -> tuple[bool, bool]:
    """Whether this host has a libnvidia-ml.so.1 where the DaemonSet's search looks, and
    whether its driver lists GPUs: what the image's detector should then report."""
    has_library = any(os.path.exists(p) for p in candidates([e for e in DEFAULT_SEARCH if e != LOADER], "/"))
    return has_library, driver_lists_gpus("/proc/driver/nvidia/gpus")


def test_the_image_carries_nvidia_ml_py_and_its_detector_reports_the_nvml_state(
        image: Image, pods: list[PodContainer], tmp_path: Path) -> None:
    """The DaemonSet's container as it is (its host mount of / at /host, its NVML flags):
    ``detector inventory`` and the start of ``detector run`` report the NVML source's state."""
    site = next((image.rootfs / "opt" / "autoclusters" / "lib").glob("python3*/site-packages"))
    assert (site / "pynvml.py").is_file() and list(site.glob("nvidia_ml_py-*.dist-info"))
    ds = workloads.detector_daemonset(Names(), "img-nvml", DEFAULT_IMAGE)
    det = ds["spec"]["template"]["spec"]["containers"][0]
    nvml_flags = det["args"][det["args"].index("--nvml-search"):]
    assert nvml_flags == ["--nvml-search", "loader,/run/nvidia/driver,/", "--host-root", "/host"]
    has_library, lists_gpus = _host_nvml()
    # No API server is needed for either: 127.0.0.1:1 refuses at once (the node lookup fails, logged).
    ca = make_ca("img-nvml", SystemClock().now(), dt.timedelta(hours=1)).cert_pem
    kw: dict[str, Any] = {"workdir": tmp_path / "pods", "namespace": "img-nvml", "token": "t", "ca_pem": ca,
                          "api_host": "127.0.0.1", "api_port": 1, "node_name": "img-nvml-node"}
    inv = PodContainer(image, ds["spec"]["template"]["spec"], "detector",
                       args=["detector", "inventory", "-o", "json", *nvml_flags], **kw)
    pods.append(inv)
    inv.proc.wait(120)
    out = inv.log()
    data = _printed_json(out)
    state = data["state"]
    assert state["expected"] is lists_gpus, out
    if not has_library:  # this machine: no NVIDIA driver
        reason = ("no libnvidia-ml.so.1 in reach: tried the loader's path, /host/run/nvidia/driver, /host "
                  "(each root in usr/lib/x86_64-linux-gnu, ")
        assert state["status"] == "unavailable" and state["reason"].startswith(reason), state
        assert inv.proc.returncode == 1 and data["inventory"] is None
    else:  # a GPU machine: the host's library, through the host mount
        assert state["status"] == ("on" if lists_gpus else "unavailable"), state
        assert data["library"].startswith("libnvidia-ml.so.1 from /host/"), data
    run_args = [*replace_flag(det["args"], "--metrics-port", str(free_port())), "--kernel-log", "/dev/null"]
    run = PodContainer(image, ds["spec"]["template"]["spec"], "detector", args=run_args, **kw)
    pods.append(run)
    line = wait_for(f"the detector's NVML state at start\n{run.log()}",
                    lambda: next((x for x in run.log().splitlines() if "NVML source: " in x), None), timeout=60)
    assert f"NVML source: {state['status']}" in line and (state["reason"] or "") in line, line
    assert run.running(), run.log()


def test_the_image_s_detector_reads_nvml_from_a_gpu_operator_driver_root_through_its_host_mount(
        image: Image, pods: list[PodContainer], tmp_path: Path) -> None:
    """The DaemonSet's host mount given a host root whose only libnvidia-ml.so.1 is the
    stand-in (tests/nvml_stub) in the GPU Operator's driver root: the image's pynvml loads it
    through the detector's search, and ``detector inventory`` reports the stand-in's GPUs."""
    host = tmp_path / "host-root"
    lib_dir = host / "run/nvidia/driver/usr/lib/x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    nvml_stub.build(lib_dir)
    State(stub_gpus(2), driver="550.90.07").write(host / "nvml-state")
    ds = workloads.detector_daemonset(Names(), "img-nvml", DEFAULT_IMAGE)
    spec = copy.deepcopy(ds["spec"]["template"]["spec"])
    det = spec["containers"][0]
    det["env"] = [*det["env"], {"name": nvml_stub.STATE_ENV, "value": "/host/nvml-state"}]
    nvml_flags = det["args"][det["args"].index("--nvml-search"):]
    ca = make_ca("img-nvml", SystemClock().now(), dt.timedelta(hours=1)).cert_pem
    inv = PodContainer(image, spec, "detector", workdir=tmp_path / "pods", namespace="img-nvml", token="t",
                       ca_pem=ca, api_host="127.0.0.1", api_port=1, volumes={HOST_ROOT_VOLUME: host},
                       args=["detector", "inventory", "-o", "json", *nvml_flags])
    pods.append(inv)
    inv.proc.wait(120)
    out = inv.log()
    assert inv.proc.returncode == 0, out
    data = _printed_json(out)
    assert data["state"]["status"] == "on", data
    assert data["library"] == f"libnvidia-ml.so.1 from /host/{lib_dir.relative_to(host)}/libnvidia-ml.so.1"
    inv_ = data["inventory"]
    assert (inv_["driverVersion"], inv_["gpuCount"]) == ("550.90.07", 2)
    assert [g["pciBusId"] for g in inv_["gpus"]] == ["00000000:10:00.0", "00000000:20:00.0"]


@pytest.fixture()
def image_names(cluster: ClusterHandle) -> Iterator[Names]:
    """A domain of its own: the session's other controllers never see these pools or nodes."""
    names = Names(domain="image-test.autoclusters.io", prefix="ImageTest")
    cluster.apply(crds(names))
    yield names


def test_controller_from_the_image_repairs_a_node_with_in_cluster_credentials(
        cluster: ClusterHandle, image: Image, image_names: Names, pods: list[PodContainer], tmp_path: Path) -> None:
    names, kube = image_names, cluster.kube
    ns = f"img-ctl-{secrets.token_hex(3)}"
    token = cluster.service_account_token(ns, CONTROLLER_SERVICE_ACCOUNT)
    rbac = controller_rbac(names, namespace=ns)
    cluster.apply(rbac)
    pool = f"img{secrets.token_hex(3)}"
    pool_path = Kube.custom_path(names.api_group, api.VERSION, "gpunodepools")
    kube.create(pool_path, {"apiVersion": f"{names.api_group}/{api.VERSION}", "kind": "GpuNodePool",
                            "metadata": {"name": pool},
                            "spec": {"consentMode": "auto",
                                     "drain": {"resetDeadlineSeconds": 5, "replaceDeadlineSeconds": 5},
                                     "provider": {"type": "simulated", "simulated": {"resetSeconds": 1}}}})
    (node,) = simnodes.create_gpu_nodes(kube, pool, 1, names, prefix=pool)
    cluster.wait_nodes_ready([node])
    try:
        deployment = workloads.controller_deployment(names, ns, DEFAULT_IMAGE, replicas=1)
        spec = deployment["spec"]["template"]["spec"]
        ctl = spec["containers"][0]
        ctl["env"] = [*ctl["env"], *({"name": f"AUTOCLUSTERS_CONTROLLER_{k}", "value": v}
                                     for k, v in CONTROLLER_ENV.items())]
        args = replace_flag(ctl["args"], "--metrics-port", str(free_port()))
        c = _start(pods, cluster, image, deployment, "controller", tmp_path, ns, token, args=args)
        assert "KUBECONFIG" not in c.env and not any("--kubeconfig" in a for a in args)

        lease = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/autoclusters-controller"

        def holder() -> str:
            with contextlib.suppress(NotFound):
                return str(kube.get(lease)["spec"].get("holderIdentity") or "")
            return ""

        # $(POD_NAME) in the Deployment's args, expanded from the downward API, is the identity.
        wait_for(f"the image's controller to lead\n{c.log()}", lambda: holder() == c.pod_name, timeout=60)

        boot = kube.get_node(node)["status"]["nodeInfo"]["bootID"]
        now = utc_iso(SystemClock().now())
        kube.patch_node_status(node, {"status": {"conditions": [{
            "type": names.gpu_condition, "status": "True", "reason": "NvidiaXIDError",
            "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus).",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        # The detector's part after the reset: the node comes back with a new boot id and no fault.
        wait_for(f"the reset (a new boot id)\n{c.log()[-3000:]}",
                 lambda: kube.get_node(node)["status"]["nodeInfo"]["bootID"] != boot, timeout=60)
        now = utc_iso(SystemClock().now())
        kube.patch_node_status(node, {"status": {"conditions": [{
            "type": names.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
            "message": "No GPU fault detected.", "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        records = Kube.custom_path(names.api_group, api.VERSION, "remediations")

        def succeeded() -> dict[str, Any] | None:
            items = kube.get(records)["items"]
            return next((r for r in items if r["spec"].get("node") == node
                         and (r.get("status") or {}).get("phase") == "Succeeded"), None)

        done = wait_for(f"a Succeeded repair record\n{c.log()[-3000:]}", succeeded, timeout=60)
        assert done["status"]["action"] == "reset" and done["spec"]["consentMode"] == "auto"
        assert c.running(), c.log()
    finally:
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/nodes/{node}")
        with contextlib.suppress(NotFound):
            kube.delete(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools", pool))
        for obj in rbac:
            if obj["kind"].startswith("Cluster"):
                with contextlib.suppress(NotFound):
                    kube.delete(f"/apis/rbac.authorization.k8s.io/v1/{obj['kind'].lower()}s/{obj['metadata']['name']}")
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/namespaces/{ns}")


def _injected_xid_lines() -> list[str]:
    """User-space Xid lines already in the host's kernel log (an earlier run on this machine):
    /dev/kmsg keeps them until the ring buffer wraps, and a reader starts from boot."""
    found = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                raw = os.read(fd, 8192).decode("utf-8", "replace")
            except BlockingIOError:
                break
            except OSError:
                continue
            head, _, text = raw.partition(";")
            if "NVRM: Xid" in text and int(head.split(",")[0]) >> 3 != 0:
                found.append(text.strip())
    finally:
        os.close(fd)
    return found


def test_detector_from_the_image_reads_dev_kmsg_and_writes_its_node_condition(
        cluster: ClusterHandle, image: Image, pods: list[PodContainer], tmp_path: Path) -> None:
    """The DaemonSet's container, with its privileges and its host mount of /dev/kmsg (the
    real device: a fault drill writes a driver line into it, as ``inject-fault --dev-kmsg``)."""
    if not cluster.local:
        pytest.skip("writes a driver line into this host's /dev/kmsg: the node must be this machine")
    names, kube = cluster.names, cluster.kube
    ns = f"img-det-{secrets.token_hex(3)}"
    cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    rbac = detector_rbac(names, ns)
    cluster.apply(rbac)
    (node,) = cluster.create_gpu_nodes(f"imgdet-{secrets.token_hex(2)}", 1)
    stale = _injected_xid_lines()
    bus = f"0000:{secrets.randbelow(200) + 16:02x}:00"
    try:
        token = cluster.service_account_token(ns, DETECTOR_SERVICE_ACCOUNT, node=node)
        ds = workloads.detector_daemonset(names, ns, DEFAULT_IMAGE)
        det = ds["spec"]["template"]["spec"]["containers"][0]
        # Shorter persistence window and poll; the PCI bus of the drill's GPU named GPU 3 (no
        # NVML here); user-space lines accepted, as for any fault drill on a real node.
        # The metrics port moved to a free one: the containers share the host's network.
        metrics_port = free_port()
        args = [*replace_flag(det["args"], "--metrics-port", str(metrics_port)), "--window", "1",
                "--poll-interval", "0.2", "--heartbeat", "30",
                "--gpu-map", f"{bus}=3", "--accept-injected-kmsg", "--no-nvml"]
        c = _start(pods, cluster, image, ds, "detector", tmp_path, ns, token, node_name=node, args=args)

        health = wait_for(f"the detector's health condition\n{c.log()}",
                          lambda: _condition(kube, node, names.detector_health_condition), timeout=60)
        # /dev/kmsg opened and read inside the container: every source readable, and the list says kmsg is on
        assert health["status"] == "False" and "kmsg on" in health["message"], health
        gpu = wait_for(f"the detector's GPU condition\n{c.log()}",
                       lambda: _condition(kube, node, names.gpu_condition), timeout=30)
        if not stale:
            assert gpu["status"] == "False", gpu

        with open("/dev/kmsg", "w") as f:
            f.write("<3>" + format_xid_line(bus, 79, "GPU has fallen off the bus.") + "\n")
        cond = wait_for(f"the GPU condition True\n{c.log()}",
                        lambda: (x := _condition(kube, node, names.gpu_condition)) and x["status"] == "True" and x,
                        timeout=30)
        assert cond["reason"] == "NvidiaXIDError" and "Xid 79" in cond["message"]
        if not stale:
            assert cond["message"] == "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
        # The DaemonSet's metrics port, served from inside the image: what the PodMonitor scrapes.
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert "autoclusters_detector_nodes 1" in metrics
        confirmed = re.search(r'^autoclusters_detector_active_faults\{class="gpu",state="confirmed"\} (\d+)$',
                              metrics, re.M)
        assert confirmed, metrics
        # driver lines earlier drills left in /dev/kmsg are faults of their own
        assert int(confirmed.group(1)) >= 1 if stale else int(confirmed.group(1)) == 1, metrics
        assert c.running(), c.log()
    finally:
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/nodes/{node}")
        for o in rbac:
            if o["kind"] == "ServiceAccount":
                continue
            kind = o["kind"]
            if kind.startswith("ValidatingAdmissionPolicy"):
                plural = "validatingadmissionpolicies" if kind == "ValidatingAdmissionPolicy" else \
                    "validatingadmissionpolicybindings"
                path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{o['metadata']['name']}"
            else:
                path = f"/apis/rbac.authorization.k8s.io/v1/{kind.lower()}s/{o['metadata']['name']}"
            with contextlib.suppress(NotFound):
                kube.delete(path)
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/namespaces/{ns}")


def _opa(sidecar: dict[str, Any], policies: Path, port: int, diag: int) -> subprocess.Popen[bytes]:
    """The webhook pod's OPA sidecar, with the sidecar's own arguments (ports remapped):
    the ``openpolicyagent/opa`` image is that binary."""
    from autoclusters.rego.opa import OpaError, opa_binary
    from tests.conftest import tool_missing

    try:
        binary = opa_binary()
    except OpaError as e:
        tool_missing(str(e))
    args = [a.replace(f":{workloads.OPA_PORT}", f":{port}").replace(f":{workloads.OPA_DIAGNOSTIC_PORT}", f":{diag}")
            for a in sidecar["args"]]
    args = [str(policies) if a == "/policies" else a for a in args]
    return subprocess.Popen([str(binary), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_webhook_from_the_image_serves_an_admission_review(
        cluster: ClusterHandle, image: Image, pods: list[PodContainer], tmp_path: Path) -> None:
    names = cluster.names
    ns = f"img-wh-{secrets.token_hex(3)}"
    token = cluster.service_account_token(ns, WEBHOOK_SERVICE_ACCOUNT)
    dep = workloads.webhook_deployment(names, ns, DEFAULT_IMAGE, "opa", tls_secret=workloads.WEBHOOK_TLS_SECRET,
                                       policy_configmap=workloads.POLICY_CONFIGMAP)
    spec = dep["spec"]["template"]["spec"]
    # The pod's Secret and ConfigMap volumes, as the kubelet writes them.
    now = dt.datetime.now(dt.UTC)
    ca = make_ca("autoclusters-webhook-ca", now, dt.timedelta(days=1))
    serving = make_serving(ca, ["127.0.0.1"], now, dt.timedelta(days=1))
    tls = tmp_path / "tls"
    tls.mkdir()
    (tls / "tls.crt").write_bytes(serving.cert_pem)
    (tls / "tls.key").write_bytes(serving.key_pem)
    (tls / "ca.crt").write_bytes(ca.cert_pem)
    for f in tls.iterdir():
        f.chmod(0o644)
    policies = tmp_path / "policies"
    policies.mkdir()
    for key, text in workloads.policy_files(policy_bundle.policies_dir()).items():
        (policies / key).write_text(text)

    opa_port, diag_port, port = free_port(), free_port(), free_port()
    sidecar = next(x for x in spec["containers"] if x["name"] == "opa")
    opa = _opa(sidecar, policies, opa_port, diag_port)
    try:
        wh = next(x for x in spec["containers"] if x["name"] == "webhook")
        args = replace_flag(replace_flag(wh["args"], "--port", str(port)), "--opa-url", f"http://127.0.0.1:{opa_port}")
        c = _start(pods, cluster, image, dep, "webhook", tmp_path, ns, token, volumes={"tls": tls}, args=args)
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
        url = f"https://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/healthz", context=ctx, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(f"the webhook's /healthz over TLS\n{c.log()}", healthy, timeout=60)

        def review(sample: Path) -> dict[str, Any]:
            req = urllib.request.Request(f"{url}/validate", data=sample.read_bytes(), method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return json.loads(r.read())["response"]

        ok = review(SAMPLES / "allowed" / "user-approves-while-required.json")
        assert ok["allowed"] is True, ok
        no = review(SAMPLES / "disallowed" / "maintenance-approved-requires-fault.fault-cleared.json")
        assert no["allowed"] is False
        assert no["status"]["message"].startswith("[maintenance-approved-requires-fault]"), no
        assert c.running(), c.log()
        # The controller identity the webhook pushed into OPA comes from the pod's namespace
        # (the service account's namespace file), not from a flag.
        with urllib.request.urlopen(f"http://127.0.0.1:{opa_port}/v1/data/autoclusters/config", timeout=5) as r:
            config = json.loads(r.read())["result"]
        assert f"system:serviceaccount:{ns}:{CONTROLLER_SERVICE_ACCOUNT}" in json.dumps(config)
    finally:
        opa.terminate()
        opa.wait(10)
        with contextlib.suppress(NotFound):
            cluster.kube.delete(f"/api/v1/namespaces/{ns}")

