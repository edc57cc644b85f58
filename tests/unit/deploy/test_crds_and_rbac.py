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


def test_only_a_local_installations_controller_may_create_and_delete_nodes() -> None:
    """The simulated provider's rights (node create/delete, nodes/status patch) go only to a
    controller on a local (kwok) cluster; every other provider's go everywhere."""
    from autoclusters.deploy import stack
    from autoclusters.deploy.providers import KINDS, ProviderType

    def grants(local: bool) -> set[tuple[str, str, str]]:
        objs = stack.rbac_objects(NAMES, "ns1", local=local)
        roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")
                 and o["metadata"]["name"].startswith("autoclusters-controller")]
        return {(g, r, v) for o in roles for rule in o["rules"] for g in rule["apiGroups"]
                for r in rule["resources"] for v in rule["verbs"]}

    simulated = {(rule.group, rule.resource, v) for rule in KINDS[ProviderType.SIMULATED].rbac for v in rule.verbs}
    others = {(rule.group, rule.resource, v) for t, k in KINDS.items() if t != ProviderType.SIMULATED
              for rule in k.rbac for v in rule.verbs}
    assert simulated == {("", "nodes", "create"), ("", "nodes", "delete"), ("", "nodes/status", "patch")}
    assert not simulated & grants(False) and others <= grants(False)
    assert simulated | others <= grants(True)


def test_every_served_version_has_the_one_schema_so_no_conversion_is_needed() -> None:
    """Conversion strategy None is right only while the versions' schemas are equal: the
    builder makes each from the one schema (copies, so no YAML anchors), and this holds them
    equal. The storage version is ``api.VERSION``; the old ones are served and deprecated."""
    from autoclusters import api

    for crd in crds(NAMES):
        spec = crd["spec"]
        assert spec["conversion"] == {"strategy": "None"}
        versions = {v["name"]: v for v in spec["versions"]}
        assert list(versions) == [api.VERSION, *api.OLD_VERSIONS] and api.OLD_VERSIONS
        new = versions[api.VERSION]
        assert new["served"] and new["storage"] and "deprecated" not in new
        for old in api.OLD_VERSIONS:
            v = versions[old]
            assert v["served"] and not v["storage"] and v["deprecated"]
            assert api.VERSION in v["deprecationWarning"]
            for part in ("schema", "subresources", "additionalPrinterColumns"):
                assert v[part] == new[part] and v[part] is not new[part]
