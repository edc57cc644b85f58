"""``manifests/`` is generated from the components; a change to a builder without a re-render fails here."""

from pathlib import Path

import pytest
import yaml

from components import render
from tests.conftest import tool_missing


def test_committed_manifests_match_the_components():
    stale = render.stale()
    assert stale == [], f"manifests/ is stale ({', '.join(stale)}): run `python -m components.render`"


def test_stale_detects_a_changed_a_missing_and_an_extra_file(tmp_path):
    for path, text in render.render().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert render.stale(tmp_path) == []
    (tmp_path / "03-detector.yaml").write_text("changed\n")
    (tmp_path / "01-crds.yaml").unlink()
    (tmp_path / "99-extra.yaml").write_text("x: 1\n")
    assert render.stale(tmp_path) == ["01-crds.yaml", "03-detector.yaml", "99-extra.yaml"]


def test_manifests_hold_the_whole_system_but_no_private_key():
    objs = [o for text in render.render().values() for o in yaml.safe_load_all(text)]
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "DaemonSet", "Deployment",
            "PodDisruptionBudget", "Service", "ConfigMap", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "GpuNodePool"} <= kinds
    assert "Secret" not in kinds
    assert {o["spec"]["consentMode"] for o in objs if o["kind"] == "GpuNodePool"} == {"auto", "propose"}


REFERENCE_BRAND = {"domain": "crusoe.ai", "conditionPrefix": "Crusoe", "eventSource": "nodepool-service"}


@pytest.mark.parametrize("brand", [{}, REFERENCE_BRAND], ids=["default", "reference"])
def test_rendered_manifests_pass_the_gitops_policy_check(brand, tmp_path, capsys, monkeypatch):
    from autoclusters.cli.main import main
    from autoclusters.rego import opa

    try:
        opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))
    monkeypatch.delenv("AUTOCLUSTERS_DOMAIN", raising=False)
    domain = ["--domain", brand["domain"]] if brand else []
    render.write(render.render(brand), tmp_path)
    assert main(["policy", "check", str(tmp_path), *domain]) == 0
    # The same check fails a pool whose consent mode a commit got wrong.
    bad = (tmp_path / "pools" / "a100.yaml").read_text().replace("consentMode: propose", "consentMode: sometimes")
    (tmp_path / "pools" / "a100.yaml").write_text(bad)
    assert main(["policy", "check", str(tmp_path), *domain]) == 1
    assert "pool-consent-mode" in capsys.readouterr().out


def test_a_branded_set_carries_only_that_brand(tmp_path):
    files = render.render(REFERENCE_BRAND)
    assert set(files) == set(render.render())
    objs = [o for path, text in files.items() for o in yaml.safe_load_all(text)]
    everything = yaml.safe_dump([o for o in objs if o["kind"] != "ConfigMap"])  # the Rego source names its defaults
    assert "autoclusters.io" not in everything and "AutoClustersGPUFault" not in everything
    assert "crusoe.ai/maintenance-required" in everything
    assert {o["spec"]["group"] for o in objs if o["kind"] == "CustomResourceDefinition"} == {"remediation.crusoe.ai"}
    env = {e["name"]: e.get("value") for o in objs if o["kind"] == "Deployment"
           for c in o["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    assert env["AUTOCLUSTERS_DOMAIN"] == "crusoe.ai" and env["AUTOCLUSTERS_CONDITION_PREFIX"] == "Crusoe"
    assert env["AUTOCLUSTERS_CONTROLLER_EVENT_SOURCE"] == "nodepool-service"
    # the CLI writes it into its own folder, never over manifests/
    assert render.main(["--domain", "crusoe.ai", "--condition-prefix", "Crusoe", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "pools" / "a100.yaml").read_text() == files["pools/a100.yaml"]
    with pytest.raises(SystemExit):
        render.main(["--domain", "crusoe.ai", "--out", str(render.MANIFESTS)])
    assert render.stale() == []


def test_a_stack_configuration_renders_its_own_manifests(tmp_path: Path) -> None:
    """``--config``: the GitOps path takes the same keys as the stack (issue 29 item 3), from a
    Pulumi stack file or a plain map; a bad one is an error naming the key, nothing written."""
    stack_file = tmp_path / "Pulumi.prod.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {
        "kubernetes:kubeconfig": "~/.kube/config", "autoclusters:imagePullSecrets": ["regcred"],
        "autoclusters:controller": {"workers": 8},
        "autoclusters:pools": [{"name": "b200", "consentMode": "propose", "provider": {"type": "hostReboot"}}]}}))
    out = tmp_path / "out"
    assert render.main(["--config", str(stack_file), "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "pools").glob("*.yaml")) == [
        "00-default-policy.yaml", "b200.yaml", "kustomization.yaml"]
    controller = next(o for o in yaml.safe_load_all((out / "04-controller.yaml").read_text())
                      if o["kind"] == "Deployment")
    pod = controller["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["args"][-4:] == ["--workers", "8", "--image-pull-secrets", "regcred"]
    plain = tmp_path / "settings.yaml"
    plain.write_text(yaml.safe_dump({"controller": {"workers": 8}, "pods": {"scheduler": {}}}))
    with pytest.raises(SystemExit):
        render.main(["--config", str(plain), "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


def test_the_prometheus_operators_objects_have_a_file_of_their_own() -> None:
    """``monitoring: {prometheusOperator: true}``: the PodMonitors and the PrometheusRule in
    06-prometheus-operator.yaml (listed by the kustomization), the rest as without them."""
    files = render.render({"monitoring": {"prometheusOperator": True}})
    objs = list(yaml.safe_load_all(files["06-prometheus-operator.yaml"]))
    assert sorted(o["kind"] for o in objs) == ["PodMonitor", "PodMonitor", "PodMonitor", "PrometheusRule"]
    assert "06-prometheus-operator.yaml" in yaml.safe_load(files["kustomization.yaml"])["resources"]
    assert {p: t for p, t in files.items() if "kustomization" not in p and "prometheus" not in p} == {
        p: t for p, t in render.render().items() if "kustomization" not in p}
def test_stale_covers_the_kustomize_components(tmp_path: Path) -> None:
    """``--check`` fails on a changed, a missing or an extra file of ``manifests/components/``."""
    from components.kustomize_components import render_components

    render.write_tree(render_components(), tmp_path)
    assert render.stale(components=tmp_path) == []
    changed, gone = sorted(render_components())[:2]
    (tmp_path / changed).write_text("changed\n")
    (tmp_path / gone).unlink()
    (tmp_path / "old-component" / "kustomization.yaml").parent.mkdir()
    (tmp_path / "old-component" / "kustomization.yaml").write_text("kind: Component\n")
    assert render.stale(components=tmp_path) == sorted(
        str(tmp_path / p) for p in (changed, gone, "old-component/kustomization.yaml"))
