"""Workload builders: what a detector, controller and webhook pod gets."""

from pathlib import Path

import pytest

from autoclusters.deploy import workloads
from autoclusters.deploy.nvml_reach import HOST_MOUNT, HOST_ROOT_VOLUME, NvmlReach
from autoclusters.deploy.policy_bundle import policies_dir
from autoclusters.names import Names

NAMES = Names()


def _container(obj, name):
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def test_detector_runs_on_gpu_nodes_through_repairs_with_its_host_mounts_and_limits():
    ds = workloads.detector_daemonset(NAMES, "ns1", "img:1")
    pod = ds["spec"]["template"]["spec"]
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["namespace"] == "ns1"
    assert pod["serviceAccountName"] == "autoclusters-detector"
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert {"nvidia.com/gpu", NAMES.taint_key, "node.kubernetes.io/unschedulable"} <= tolerated
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {t["matchExpressions"][0]["key"] for t in terms}
    assert keys == {"nvidia.com/gpu.product", NAMES.pool_label}
    mounts = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert mounts == {"/dev/kmsg", "/"}  # the host's root for the driver's NVML (deploy/nvml_reach.py)
    host = next(v for v in pod["volumes"] if v["name"] == HOST_ROOT_VOLUME)
    assert host["hostPath"]["type"] == "Directory"  # never created on the host, always there
    assert all(v["hostPath"]["type"] for v in pod["volumes"])  # type "" would create a missing path
    # Nothing inside /proc (runc refuses it) or /sys (absent InfiniBand paths cannot be created).
    assert not any(m.startswith(("/proc/", "/sys/")) for m in mounts)
    c = _container(ds, "detector")
    assert all(m["readOnly"] for m in c["volumeMounts"])
    assert c["resources"]["limits"] == {"cpu": "100m", "memory": "64Mi"}
    # /dev/kmsg: the device cgroup (privileged), CAP_SYSLOG and uid 0; the root filesystem stays read-only.
    assert c["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsNonRoot": False,
                                    "readOnlyRootFilesystem": True}
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    # what an arg such as --dcgm-exporter-url http://$(HOST_IP):9400/metrics expands
    assert {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}} in c["env"]
    assert c["args"] == ["detector", "run", "--metrics-port", str(workloads.DETECTOR_METRICS_PORT),
                         "--nvml-search", "loader,/run/nvidia/driver,/", "--host-root", HOST_MOUNT]
    root_mount = next(m for m in c["volumeMounts"] if m["name"] == HOST_ROOT_VOLUME)
    assert root_mount == {"name": HOST_ROOT_VOLUME, "mountPath": HOST_MOUNT, "readOnly": True,
                          "mountPropagation": "HostToContainer"}  # a driver root mounted later is seen
    assert "runtimeClassName" not in pod and not any(e["name"].startswith("NVIDIA_") for e in c["env"])


def test_the_nvml_setting_shapes_the_detector_pod():
    runtime = workloads.detector_daemonset(NAMES, "ns1", "img:1", nvml=NvmlReach(runtime_class_name="nvidia"))
    pod = runtime["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in _container(runtime, "detector")["env"]}
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")
    loader_only = workloads.detector_daemonset(NAMES, "ns1", "img:1", nvml=NvmlReach(search=("loader",), host_root=""))
    c = _container(loader_only, "detector")
    assert c["args"][-2:] == ["--nvml-search", "loader"]
    assert [v["name"] for v in loader_only["spec"]["template"]["spec"]["volumes"]] == ["kmsg"]
    off = _container(workloads.detector_daemonset(NAMES, "ns1", "img:1", nvml=NvmlReach(enabled=False)), "detector")
    assert c["args"][:4] == off["args"][:4] and off["args"][-1] == "--no-nvml"
    assert [m["name"] for m in off["volumeMounts"]] == ["kmsg"]


@pytest.mark.parametrize("obj", [workloads.detector_daemonset(NAMES, "ns1", "img:1"),
                                 workloads.controller_deployment(NAMES, "ns1", "img:1"),
                                 workloads.controller_deployment(NAMES, "ns1", "img:1", shards=2, shard=1)],
                         ids=["detector", "controller", "controller-shard"])
def test_the_metrics_port_is_served_named_and_announced_as_one_number(obj):
    """The process serves on the port its argument names, the container declares it under the
    name the PodMonitors scrape, and the pod's annotations point a hand-made Prometheus at it."""
    template = obj["spec"]["template"]
    (c,) = template["spec"]["containers"]
    port = int(c["args"][c["args"].index("--metrics-port") + 1])
    assert {"name": workloads.METRICS_PORT_NAME, "containerPort": port} in c["ports"]
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                                                   "prometheus.io/path": "/metrics"}


def test_the_webhook_announces_its_metrics_on_its_https_port_and_the_pod_monitor_verifies_its_certificate():
    dep = workloads.webhook_deployment(NAMES, "ns1", "img:1", "opa:1", tls_secret=workloads.WEBHOOK_TLS_SECRET,
                                       policy_configmap=workloads.POLICY_CONFIGMAP)
    template = dep["spec"]["template"]
    webhook = _container(dep, "webhook")
    assert {"name": workloads.WEBHOOK_PORT_NAME, "containerPort": workloads.WEBHOOK_PORT} in webhook["ports"]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": str(workloads.WEBHOOK_PORT),
        "prometheus.io/path": "/metrics", "prometheus.io/scheme": "https"}
    from autoclusters.deploy.monitoring import webhook_pod_monitor

    (endpoint,) = webhook_pod_monitor("ns1", {})["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == workloads.WEBHOOK_PORT_NAME and endpoint["scheme"] == "https"
    # the CA of the Secret the webhook serves from, and the name its certificate is issued for
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": workloads.WEBHOOK_TLS_SECRET, "key": "ca.crt"}
    assert "ca.crt" in workloads.webhook_tls_secret("ns1", workloads.WEBHOOK_TLS_SECRET, cert_pem="c", key_pem="k",
                                                    ca_pem="a")["stringData"]
    assert endpoint["tlsConfig"]["serverName"] == "autoclusters-webhook.ns1.svc"


def test_names_reach_the_pods_environment():
    ds = workloads.detector_daemonset(Names("crusoe.ai", "Crusoe"), "ns1", "img:1")
    env = {e["name"]: e.get("value") for e in _container(ds, "detector")["env"]}
    assert env["AUTOCLUSTERS_DOMAIN"] == "crusoe.ai"
    assert env["AUTOCLUSTERS_CONDITION_PREFIX"] == "Crusoe"
    tolerated = {t["key"] for t in ds["spec"]["template"]["spec"]["tolerations"]}
    assert "crusoe.ai/maintenance-required" in tolerated


def test_controller_is_two_leader_elected_replicas_spread_over_nodes():
    dep = workloads.controller_deployment(NAMES, "ns1", "img:1")
    assert dep["spec"]["replicas"] == 2
    c = _container(dep, "controller")
    assert c["args"][:2] == ["controller", "run"]
    assert c["args"][c["args"].index("--namespace") + 1] == "ns1"  # where its leader-election Lease lives
    assert c["args"][c["args"].index("--identity") + 1] == "$(POD_NAME)"
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "autoclusters-controller"
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == \
        "kubernetes.io/hostname"
    assert c["securityContext"]["runAsNonRoot"] is True


def test_pdb_selects_the_component_it_protects():
    pdb = workloads.pod_disruption_budget(workloads.CONTROLLER, "ns1")
    dep = workloads.controller_deployment(NAMES, "ns1", "img:1")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_webhook_has_an_opa_sidecar_on_loopback_serving_the_policy_configmap():
    dep = workloads.webhook_deployment(NAMES, "ns1", "img:1", "opa:1", tls_secret="tls", policy_configmap="pol")
    hook, opa = _container(dep, "webhook"), _container(dep, "opa")
    assert opa["image"] == "opa:1"
    assert "--addr=127.0.0.1:8181" in opa["args"]
    assert "--opa-url" in hook["args"] and "http://127.0.0.1:8181" in hook["args"]
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["policies"]["configMap"]["name"] == "pol"
    assert vols["tls"]["secret"]["secretName"] == "tls"
    # Probes reach the pod IP, so OPA's health must not sit on the loopback-only API address.
    assert opa["readinessProbe"]["httpGet"]["port"] == workloads.OPA_DIAGNOSTIC_PORT
    svc = workloads.webhook_service("ns1")
    assert svc["spec"]["ports"][0]["targetPort"] == workloads.WEBHOOK_PORT
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_policy_configmap_carries_every_module_but_the_tests(tmp_path: Path):
    (tmp_path / "admission").mkdir()
    (tmp_path / "admission" / "src.rego").write_text("package a\n")
    (tmp_path / "admission" / "src_test.rego").write_text("package a_test\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "x.rego").write_text("package lib\n")
    cm = workloads.policy_configmap("ns1", "pol", tmp_path)
    assert cm["data"] == {"admission.src.rego": "package a\n", "lib.x.rego": "package lib\n"}


def test_policy_configmap_of_an_empty_directory_fails(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        workloads.policy_configmap("ns1", "pol", tmp_path)


def test_the_shipped_policies_fit_in_a_configmap():
    data = workloads.policy_files(policies_dir())
    assert data and not any(k.endswith("_test.rego") for k in data)
    assert sum(len(v) for v in data.values()) < 900_000  # ConfigMaps hold at most 1 MiB


@pytest.mark.parametrize("build", [
    lambda: _container(workloads.controller_deployment(NAMES, "ns1", "img:1"), "controller"),
    lambda: _container(workloads.detector_daemonset(NAMES, "ns1", "img:1"), "detector"),
    lambda: _container(workloads.webhook_deployment(NAMES, "ns1", "img:1", "opa:1", tls_secret="t",
                                                    policy_configmap="p"), "webhook"),
])
def test_every_pod_command_is_one_the_cli_accepts(build):
    from autoclusters.cli.main import build_parser

    args = build()["args"]
    parsed = build_parser().parse_args(args)  # argparse exits on an unknown flag
    assert callable(parsed.func)


@pytest.mark.parametrize("source", [None, "nodepool-service"])
def test_the_stack_event_source_reaches_the_controller_flag(source, monkeypatch):
    """Stack config ``eventSource`` -> the Deployment's env -> ``controller run``'s setting."""
    from autoclusters.cli.main import build_parser
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.deploy.stack_config import stack_config_from_dict

    cfg = stack_config_from_dict({} if source is None else {"eventSource": source})
    dep = workloads.controller_deployment(NAMES, "ns1", "img:1", event_source=cfg.event_source)
    for e in _container(dep, "controller")["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    args = build_parser().parse_args(["controller", "run"])
    assert args.event_source == (source or ControllerConfig().event_source) == cfg.event_source
    assert ControllerConfig().event_source == workloads.CONTROLLER  # autoclusters' own name by default


def test_the_controller_flag_overrides_the_environment(monkeypatch):
    from autoclusters.cli.main import build_parser

    monkeypatch.setenv(workloads.EVENT_SOURCE_ENV, "from-env")
    assert build_parser().parse_args(["controller", "run"]).event_source == "from-env"
    assert build_parser().parse_args(["controller", "run", "--event-source", "nodepool-service"]).event_source \
        == "nodepool-service"


def test_an_invalid_event_source_is_a_clear_usage_error(capsys):
    from autoclusters.cli.main import main

    assert main(["controller", "run", "--event-source", "node pool"]) == 2
    assert "must be a Kubernetes qualified name" in capsys.readouterr().err


def test_a_sharded_controller_is_one_deployment_and_pdb_per_shard():
    from autoclusters.deploy import stack
    from autoclusters.deploy.stack_config import stack_config_from_dict

    objs = stack.controller_objects(NAMES, "ns1", "img:1", shards=3)
    deps = [o for o in objs if o["kind"] == "Deployment"]
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert [d["metadata"]["name"] for d in deps] == [f"autoclusters-controller-shard-{i}" for i in range(3)]
    for i, (dep, pdb) in enumerate(zip(deps, pdbs, strict=True)):
        args = _container(dep, "controller")["args"]
        assert args[args.index("--shards") + 1] == "3" and args[args.index("--shard") + 1] == str(i)
        assert dep["spec"]["replicas"] == 2  # each shard keeps a standby
        pods = dep["spec"]["template"]["metadata"]["labels"]
        # the shard's PDB and anti-affinity select its own pods and no other shard's
        assert pdb["spec"]["selector"] == dep["spec"]["selector"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pods.items()
        for other in deps[:i] + deps[i + 1:]:
            assert not pdb["spec"]["selector"]["matchLabels"].items() <= \
                other["spec"]["template"]["metadata"]["labels"].items()
        anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["labelSelector"] == \
            dep["spec"]["selector"]
    # one shard: exactly the unsharded objects (an upgrade changes nothing)
    assert [o for o in stack.controller_objects(NAMES, "ns1", "img:1", shards=1)
            if o["kind"] in ("Deployment", "PodDisruptionBudget")] == [
        workloads.controller_deployment(NAMES, "ns1", "img:1", webhook_config="autoclusters-webhook-ns1"),
        workloads.pod_disruption_budget(workloads.CONTROLLER, "ns1")]
    # one keeper of the webhook's certificate: shard 0's leader, for this installation's configuration
    keepers = [_container(d, "controller")["args"] for d in deps if "--webhook-tls-secret" in
               _container(d, "controller")["args"]]
    assert keepers == [_container(deps[0], "controller")["args"]]
    assert keepers[0][keepers[0].index("--webhook-config") + 1] == "autoclusters-webhook-ns1"
    assert "--shards" not in _container(workloads.controller_deployment(NAMES, "ns1", "img:1"), "controller")["args"]
    # the stack setting reaches the objects
    cfg = stack_config_from_dict({"controllerShards": "2"})
    names = [o["metadata"]["name"] for o in stack.stack_objects(cfg) if o["kind"] == "Deployment"]
    assert "autoclusters-controller-shard-1" in names and "autoclusters-controller" not in names


@pytest.mark.parametrize("value", [0, -1, "two", True, 1.5])
def test_controller_shards_must_be_a_positive_integer(value):
    from autoclusters.deploy.stack_config import stack_config_from_dict
    from autoclusters.pools.pool_config import PoolConfigError

    with pytest.raises(PoolConfigError, match="controllerShards must be an integer"):
        stack_config_from_dict({"controllerShards": value})


@pytest.mark.parametrize("nvml, own_mounts", [({}, False), ({"hostRoot": "", "search": ["loader"]}, True),
                                              ({"enabled": False}, True)])
def test_the_journal_detector_mounts_the_hosts_journal_where_its_source_reads_it(tmp_path, nvml, own_mounts):
    """Stack config ``kernelLogSource: journal`` -> the DaemonSet's mounts and args -> the source ``detector
    run`` builds: the mounts put the host's journal directories where that source opens them. With the
    NVML host-root mount (the default) the journal is read through it and has no mounts of its own;
    without it, its own mounts, under a root of their own (never nested in another host mount)."""
    from autoclusters.api import KernelLogSource
    from autoclusters.cli.main import build_parser
    from autoclusters.deploy.stack import stack_objects
    from autoclusters.deploy.stack_config import stack_config_from_dict
    from autoclusters.detector.journal import JOURNAL_DIRS, JournalSource
    from autoclusters.detector.kernel_log import KernelLogInterpreter
    from autoclusters.detector.node import NodePaths, kernel_log_source
    from autoclusters.detector.pci import GpuIndex
    from autoclusters.faults.catalog import load_catalog

    cfg = stack_config_from_dict({"kernelLogSource": "journal", "nvml": nvml})
    assert cfg.kernel_log_source == KernelLogSource.JOURNAL
    ds = next(o for o in stack_objects(cfg) if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"]}
    c = _container(ds, "detector")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert all(m["readOnly"] for m in c["volumeMounts"])
    assert "/dev/kmsg" not in {v["path"] for v in volumes.values()}  # the journal needs no device
    # /var/log always exists; an absent /run/log may be made (empty, on a tmpfs); never /var/log/journal,
    # whose creation would turn a host's journald persistent
    assert {volumes[n]["path"]: volumes[n]["type"] for n in mounts if n.startswith("journal")} == ({
        "/var/log": "Directory", "/run/log": "DirectoryOrCreate"} if own_mounts else {})
    args = build_parser().parse_args(c["args"])
    assert args.kernel_log_source == "journal"
    container_path = {volumes[n]["path"]: p for n, p in mounts.items()}  # host path -> where the pod sees it
    for d in JOURNAL_DIRS:  # var/log/journal, run/log/journal: under the root the flag names
        parent, leaf = d.rsplit("/", 1)
        seen = f"{container_path['/' + parent]}/{leaf}" if own_mounts else f"{container_path['/']}/{d}"
        assert f"{args.journal_root}/{d}" == seen
    if own_mounts:  # not inside the host-root mount's path, where a mount point could not be made
        assert not any(p == "/host" or p.startswith("/host/") for p in mounts.values())
    paths = NodePaths(kernel_log_source=KernelLogSource(args.kernel_log_source), journal_root=args.journal_root)
    src = kernel_log_source(paths, KernelLogInterpreter(load_catalog(), GpuIndex()))
    assert isinstance(src, JournalSource) and src.root == args.journal_root and src.name == "journal"


def test_the_default_detector_reads_dev_kmsg_and_the_stack_refuses_a_file_source():
    from autoclusters.api import KernelLogSource

    default = workloads.detector_daemonset(NAMES, "ns1", "img:1")
    assert workloads.detector_daemonset(NAMES, "ns1", "img:1", kernel_log_source=KernelLogSource.KMSG) == default
    assert "--kernel-log-source" not in _container(default, "detector")["args"]
    with pytest.raises(ValueError, match="kmsg or journal, not file"):
        workloads.detector_daemonset(NAMES, "ns1", "img:1", kernel_log_source=KernelLogSource.FILE)
