"""The operator's allow-lists (autoclusters/allow_lists.py): one document, read strictly, carried
unchanged to the controller's flag, the webhook's flag and the pool policy's data, and the
stack's own pools held to it before anything is created."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pytest

from autoclusters import allow_lists
from autoclusters.allow_lists import AllowList, AllowListError, AllowLists, from_config
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.deploy.providers import KINDS
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.pools.pool_config import PoolConfigError

DOC = {"commands": {"replace": ["/opt/replace-node", "--fast"]}, "images": {"reboot": "registry.example/reboot:1"},
       "urls": {"notice": "https://ops.example/drain"}}


def test_the_document_reads_back_as_written() -> None:
    lists = from_config(DOC)
    assert lists.to_config() == DOC and from_config(lists.flag_value()) == lists
    assert lists.allows(AllowList.COMMANDS, ["/opt/replace-node", "--fast"])
    assert not lists.allows(AllowList.COMMANDS, ["/opt/replace-node"])  # the whole argv, not a prefix
    assert not lists.allows(AllowList.URLS, "https://ops.example/drain?x=1")
    assert from_config(None) == from_config({}) == from_config("") == allow_lists.NONE


@pytest.mark.parametrize(("doc", "words"), [
    ({"programs": {}}, "unknown key(s) programs"),
    ({"commands": ["/bin/true"]}, "allowLists.commands must be a mapping"),
    ({"commands": {"Bad Name": ["/bin/true"]}}, "entry name 'Bad Name' must be a DNS label"),
    ({"commands": {"x": "/bin/true"}}, "allowLists.commands.x must be a non-empty list"),
    ({"commands": {"x": []}}, "allowLists.commands.x must be a non-empty list"),
    ({"images": {"x": "a b"}}, "allowLists.images.x must be a non-empty string without spaces"),
    ({"urls": {"x": "ftp://h/x"}}, "allowLists.urls.x must be an http:// or https:// URL"),
    ("{not json", "is not JSON"),
])
def test_a_bad_document_is_refused_naming_the_entry(doc: Any, words: str) -> None:
    with pytest.raises(AllowListError, match=words.replace("(", r"\(").replace(")", r"\)")):
        from_config(doc)


def test_the_flag_is_the_controllers_config_field() -> None:
    """``--allow-lists`` is derived from ControllerConfig's field (cli/controller.py), and the
    webhook takes the same flag."""
    assert "allow_lists" in {f.name for f in fields(ControllerConfig)}
    assert "--" + "allow_lists".replace("_", "-") == allow_lists.FLAG


def test_every_list_a_provider_setting_names_exists() -> None:
    named = {s.allow_list for k in KINDS.values() for s in k.settings if s.allow_list}
    assert named <= {k.value for k in AllowList} and named  # command.command, hostReboot.image


POOL = {"name": "a100", "provider": {"type": "command", "command": {"command": ["/opt/replace-node", "--fast"]}},
        "preDrain": {"hook": {"url": "https://ops.example/drain"}}}


def test_the_stack_refuses_its_own_pool_naming_what_is_not_listed() -> None:
    with pytest.raises(PoolConfigError, match=r"pool 'a100': spec.preDrain.hook.url .* allowLists.urls"):
        stack_config_from_dict({"pools": [POOL]})
    hook_only = {**DOC, "commands": {}}
    with pytest.raises(PoolConfigError, match=r"spec.provider.command.command .* allowLists.commands .*entries: none"):
        stack_config_from_dict({"pools": [POOL], "allowLists": hook_only})
    assert stack_config_from_dict({"pools": [POOL], "allowLists": DOC}).allow_lists == from_config(DOC)


def test_the_document_reaches_the_controller_the_webhook_and_the_policy_data() -> None:
    objs = stack_objects(stack_config_from_dict({"pools": [POOL], "allowLists": DOC}))
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    for name in ("autoclusters-controller", "autoclusters-webhook"):
        args = deployments[name]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert json.loads(args[args.index(allow_lists.FLAG) + 1]) == DOC, name
    [policy_cm] = [o for o in objs if o["kind"] == "ConfigMap" and "data.json" in o.get("data", {})]
    assert json.loads(policy_cm["data"]["data.json"])["autoclusters"]["config"]["allowLists"] == DOC
    [jobs] = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
              and o["metadata"]["name"] == "autoclusters-controller-jobs"]
    variables = {v["name"]: v["expression"] for v in jobs["spec"]["variables"]}
    assert variables["listedImages"] == "['registry.example/reboot:1']"


def test_no_document_no_flag_and_empty_lists_in_the_policy_data() -> None:
    objs = stack_objects(stack_config_from_dict({}))
    for o in objs:
        if o["kind"] == "Deployment":
            assert allow_lists.FLAG not in o["spec"]["template"]["spec"]["containers"][0].get("args", [])
    [policy_cm] = [o for o in objs if o["kind"] == "ConfigMap" and "data.json" in o.get("data", {})]
    assert json.loads(policy_cm["data"]["data.json"])["autoclusters"]["config"]["allowLists"] == \
        AllowLists().to_config() == {"commands": {}, "images": {}, "urls": {}}
