"""The controller's default provider image is its own pod's (controller/own_image.py): the
image a kustomize override or a Helm value gave the Deployment reaches the reboot Job."""

from __future__ import annotations

import pytest

from autoclusters.controller.own_image import OwnImageError, own_image, own_pod
from autoclusters.deploy.workloads import CONTROLLER_CONTAINER
from tests.unit.fakeapi import FakeApi

NS = "autoclusters-system"


def _pod(api: FakeApi, name: str, containers: list[dict[str, str]]) -> None:
    api.put(f"/api/v1/namespaces/{NS}/pods", {"apiVersion": "v1", "kind": "Pod",
                                              "metadata": {"name": name, "namespace": NS},
                                              "spec": {"containers": containers}})


def test_the_image_of_the_named_container_of_its_own_pod() -> None:
    api = FakeApi()
    _pod(api, "ctl-1", [{"name": "sidecar", "image": "other:1"},
                        {"name": CONTROLLER_CONTAINER, "image": "registry.example.com/ac:0.2"}])
    assert own_image(api.kube(), NS, "ctl-1", CONTROLLER_CONTAINER) == "registry.example.com/ac:0.2"


def test_a_missing_pod_or_container_is_a_clear_error() -> None:
    api = FakeApi()
    with pytest.raises(OwnImageError, match="cannot read the controller's own pod autoclusters-system/gone"):
        own_image(api.kube(), NS, "gone", CONTROLLER_CONTAINER)
    _pod(api, "ctl-2", [{"name": "sidecar", "image": "other:1"}])
    with pytest.raises(OwnImageError, match=r"no container 'controller'.*--provider-image"):
        own_image(api.kube(), NS, "ctl-2", CONTROLLER_CONTAINER)


def test_its_pod_comes_from_the_downward_api() -> None:
    assert own_pod({"POD_NAME": "ctl-1", "POD_NAMESPACE": NS}) == (NS, "ctl-1")
    assert own_pod({"POD_NAME": "ctl-1"}) is None
    assert own_pod({}) is None
