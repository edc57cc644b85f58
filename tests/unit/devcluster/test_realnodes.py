"""The real nodes' settings (devcluster/realnodes.py): what each node is given, checked without
booting one (tests/integration/test_real_nodes.py boots them)."""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from pathlib import Path

import pytest

from autoclusters.devcluster import pki, realnodes
from autoclusters.devcluster.realnodes import RealNode

REPO = Path(__file__).resolve().parents[3]


def _node(tmp_path: Path, index: int = 0) -> RealNode:
    return RealNode(name=realnodes.node_name("dev", index), index=index, dir=str(tmp_path / f"n{index}"),
                    logs=str(tmp_path), ip=realnodes.node_ip(index), pod_cidr=realnodes.pod_cidr(index),
                    kubelet="kubelet", kube_proxy="kube-proxy", containerd="containerd", ctr="ctr",
                    cni_bin="/usr/lib/cni", images=[("pause.oci.tar", realnodes.PAUSE_BASE_NAME)], python="python3")


def test_every_node_has_its_own_address_pod_range_cgroup_and_veth(tmp_path: Path) -> None:
    nodes = [_node(tmp_path, i) for i in range(realnodes.MAX_REAL_NODES)]
    for attr in ("name", "ip", "pod_cidr", "cgroup_root", "host_veth"):
        assert len({getattr(n, attr) for n in nodes}) == len(nodes), attr
    for n in nodes:
        ip = ipaddress.ip_address(n.ip)
        assert ip in realnodes.NETWORK and not ip.is_loopback and n.ip != realnodes.HOST_IP
        assert ipaddress.ip_network(n.pod_cidr).subnet_of(realnodes.POD_NETWORK)  # type: ignore[arg-type]
        assert len(n.host_veth) <= 15  # a Linux interface name
    assert len(realnodes.BRIDGE) <= 15
    assert ipaddress.ip_address(realnodes.HOST_IP) in realnodes.NETWORK


def test_the_api_servers_certificate_names_the_address_the_real_nodes_reach_it_at() -> None:
    assert realnodes.HOST_IP in pki.SERVING_HOSTS


def test_kubelet_configuration_holds_what_this_host_needs(tmp_path: Path) -> None:
    node = _node(tmp_path)
    cfg = realnodes.kubelet_config(node, Path("ca.crt"), (Path("s.crt"), Path("s.key")), 300, 40)
    assert cfg["cgroupDriver"] == "cgroupfs" and cfg["failCgroupV1"] is False  # cgroups v1 (hybrid) here
    assert cfg["cgroupRoot"] == node.cgroup_root
    assert cfg["authentication"]["anonymous"]["enabled"] is False and cfg["authorization"]["mode"] == "Webhook"
    assert cfg["imageGCHighThresholdPercent"] == 100  # the imported images cannot be pulled again
    assert cfg["nodeStatusReportFrequency"] == "300s" and cfg["nodeLeaseDurationSeconds"] == 40


def test_containerd_uses_the_pause_image_built_here_and_never_a_negative_oom_score(tmp_path: Path) -> None:
    node = _node(tmp_path)
    cfg = tomllib.loads(realnodes.containerd_config(node))
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == realnodes.PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == str(node.path / "cni")
    assert cfg["root"] == str(node.path / "containerd") and cfg["state"] == "/run/containerd"
    # the image build names its layout's reference by the tag the sandbox image is called by
    build = (REPO / "tools" / "node-images" / "build.sh").read_text()
    assert re.search(rf"^tag={realnodes.PAUSE_TAG}\b", build, re.M)


def test_the_pod_network_is_the_nodes_own_range_with_its_state_on_the_nodes_run(tmp_path: Path) -> None:
    node = _node(tmp_path, 3)
    bridge = realnodes.cni_config(node)["plugins"][0]
    assert bridge["ipam"]["ranges"] == [[{"subnet": node.pod_cidr}]]
    assert bridge["ipam"]["dataDir"].startswith("/run/")  # a reboot forgets leases, as a tmpfs does


def test_a_nodes_kernel_log_takes_one_record_at_a_time(tmp_path: Path) -> None:
    node = _node(tmp_path)
    node.path.mkdir(parents=True)
    node.write_kernel_log("4,1,2,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.")
    assert node.kmsg.read_text().count("\n") == 1
    with pytest.raises(ValueError):
        node.write_kernel_log("one\ntwo")


def test_a_nodes_settings_round_trip_through_its_config_file(tmp_path: Path) -> None:
    node = _node(tmp_path)
    node.path.mkdir(parents=True)
    from dataclasses import asdict

    node.config.write_text(json.dumps(asdict(node)))
    assert RealNode.load(node.config) == node
