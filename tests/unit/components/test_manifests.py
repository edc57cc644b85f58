"""``manifests/`` is generated from the components; a change to a builder without a re-render fails here."""

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


def test_rendered_manifests_pass_the_gitops_policy_check(tmp_path, capsys):
    from autoclusters.cli.main import main
    from autoclusters.policy import opa

    try:
        opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))
    for path, text in render.render().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert main(["policy", "check", str(tmp_path)]) == 0
    # The same check fails a pool whose consent mode a commit got wrong.
    bad = (tmp_path / "pools" / "a100.yaml").read_text().replace("consentMode: propose", "consentMode: sometimes")
    (tmp_path / "pools" / "a100.yaml").write_text(bad)
    assert main(["policy", "check", str(tmp_path)]) == 1
    assert "pool-consent-mode" in capsys.readouterr().out
