"""Turns a plain-dict Kubernetes object into the matching ``pulumi_kubernetes`` resource.

The dicts come from ``autoclusters.deploy``; keeping the translation in one function means
a component never restates an object's fields, so Pulumi and ``manifests/`` cannot drift.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_SKIP = {"apiVersion", "kind", "status"}


def resource_name(obj: dict[str, Any]) -> str:
    """A stable Pulumi name: kind, namespace and name, so renaming an object replaces it."""
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace", ""), meta["name"]]
    return "-".join(p for p in parts if p)


def resource_class(api_version: str, kind: str) -> type[pulumi.CustomResource] | None:
    """The typed class for a built-in kind; None for custom resources."""
    group, _, version = api_version.rpartition("/")
    module_name = "core" if not group else group.split(".")[0]
    if group and not (group.endswith(".k8s.io") or "." not in group):
        return None
    try:
        module = importlib.import_module(f"pulumi_kubernetes.{module_name}.{version}")
    except ImportError:
        return None
    return getattr(module, kind, None)


def k8s_resource(obj: dict[str, Any], opts: pulumi.ResourceOptions, name: str | None = None) -> Any:
    """Creates ``obj`` as a Pulumi resource; top-level fields become the class's keyword arguments.

    Typed ``Any``: the class is chosen at run time, and the ``metadata`` output callers read is
    declared by each generated class, not by ``pulumi.CustomResource``."""
    cls = resource_class(obj["apiVersion"], obj["kind"])
    name = name or resource_name(obj)
    fields = {k: v for k, v in obj.items() if k not in _SKIP}
    if cls is None:
        return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=obj["kind"], opts=opts,
                                                **fields)
    # Each generated class has a public ``<Kind>InitArgs`` next to it whose signature lists
    # the class's arguments (the second form of the class's constructor takes one).
    init_args = getattr(importlib.import_module(cls.__module__), f"{cls.__name__}InitArgs")
    accepted = set(inspect.signature(init_args).parameters)
    kwargs = {}
    for key, value in fields.items():
        arg = _CAMEL.sub("_", key).lower()
        if arg not in accepted:
            raise TypeError(f"{obj['kind']} {name}: field {key!r} has no {cls.__name__} argument")
        kwargs[arg] = value
    return cls(name, opts=opts, **kwargs)
