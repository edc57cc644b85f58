"""The CRDs' and the controller RBAC's shape."""

from __future__ import annotations

from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.crds import crds
from autoclusters.names import Names

NAMES = Names()


def test_crds_and_rbac_shape() -> None:
    pool_crd, rem_crd = crds(NAMES)
    assert pool_crd["spec"]["names"]["shortNames"] == ["gnp"] and rem_crd["spec"]["names"]["shortNames"] == ["rem"]
    spec = pool_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["consentMode"]["enum"] == ["auto", "propose", "off"]
    assert spec["maxConcurrentRepairs"]["minimum"] == 1
    cols = [c["name"] for c in rem_crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert {"Node", "Phase", "Outcome", "Action"} <= set(cols)
    kinds = [o["kind"] for o in controller_rbac(NAMES)]
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding"]
