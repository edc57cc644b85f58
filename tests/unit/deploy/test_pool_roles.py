"""The pool roles' shape (deploy/pool_roles.py); the API server's verdicts are in
tests/integration/test_pool_roles.py."""

from __future__ import annotations

from autoclusters import pool_fields
from autoclusters.deploy.pool_roles import AUTHOR_VERB, pool_roles
from autoclusters.names import Names


def test_an_editor_key_is_a_key_of_the_spec_and_no_allow_list_reference_is_one() -> None:
    spec_keys = set(pool_fields.keys_of(""))
    assert set(pool_fields.EDITOR_KEYS) <= spec_keys
    held = {path.split(".", 1)[0] for path in pool_fields.ALLOW_LISTED} | {"provider", "nodeSelector"}
    assert not held & set(pool_fields.EDITOR_KEYS)


def test_the_roles_aggregate_as_documented() -> None:
    roles = {o["metadata"]["name"]: o for o in pool_roles(Names(), "ns1") if o["kind"] == "ClusterRole"}
    labels = {name: {k.rsplit("-", 1)[-1] for k in o["metadata"]["labels"] if "aggregate-to-" in k}
              for name, o in roles.items()}
    assert labels == {"autoclusters-pool-viewer-ns1": {"view"}, "autoclusters-pool-editor-ns1": {"edit"},
                      "autoclusters-pool-author-ns1": set()}
    verbs = {name: set(o["rules"][0]["verbs"]) for name, o in roles.items()}
    assert AUTHOR_VERB in verbs["autoclusters-pool-author-ns1"]
    assert AUTHOR_VERB not in verbs["autoclusters-pool-editor-ns1"]
    assert not {"create", "delete"} & verbs["autoclusters-pool-editor-ns1"]
    assert verbs["autoclusters-pool-viewer-ns1"] == {"get", "list", "watch"}
