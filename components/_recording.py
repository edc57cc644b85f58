"""Runs components against Pulumi's mock engine and records what they register.

The unit tests read the records to check what a component creates, and
``tests/unit/components/test_stack_objects.py`` compares them with
``autoclusters.deploy.stack.stack_objects``, the list ``manifests/`` is rendered from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi

DYNAMIC = "pulumi-python:dynamic:Resource"


@dataclass(frozen=True)
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]

    @property
    def is_kubernetes(self) -> bool:
        return self.typ.startswith("kubernetes:")

    def manifest(self) -> dict[str, Any]:
        """The Kubernetes object this resource stands for, as a plain dict."""
        group_version, kind = self.typ.removeprefix("kubernetes:").split(":")
        inputs = {k: _reveal(self.inputs[k]) for k in sorted(self.inputs) if not k.startswith("__")}
        api_version = inputs.pop("apiVersion", None) or group_version.removeprefix("core/")
        inputs.pop("kind", None)
        return {"apiVersion": api_version, "kind": kind, **inputs}


_SECRET_SIG = "4dabf18193072939515e22adb298388d"


def _reveal(value: Any) -> Any:
    """Unwraps Pulumi's secret envelopes and undoes the wire format (protobuf Structs carry
    every number as a float and no key order), so a recorded input reads as the dict the
    builder made: integers as integers, keys sorted for a stable rendering."""
    if isinstance(value, dict):
        if _SECRET_SIG in value and "value" in value:
            return _reveal(value["value"])
        return {k: _reveal(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_reveal(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class RecordingMocks(pulumi.runtime.Mocks):
    """Echoes inputs as outputs; certificate resources get ``certificate(...)``'s PEMs."""

    def __init__(self, certificate: Callable[[list[str], list[str]], dict[str, str]] | None = None) -> None:
        self.registered: list[Registered] = []
        self._certificate = certificate

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        inputs = json.loads(json.dumps(args.inputs, default=str))
        self.registered.append(Registered(args.typ, args.name, inputs))
        outputs = dict(args.inputs)
        if args.typ == DYNAMIC and "dns_names" in outputs:
            pems = self._certificate(list(outputs["dns_names"]), list(outputs["ip_addresses"])) \
                if self._certificate else {"ca_pem": "", "cert_pem": "", "key_pem": ""}
            outputs.update(pems)
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.registered if r.typ == typ]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        return [r.manifest() for r in self.registered if r.is_kubernetes]


def record(build: Callable[[], Any], mocks: RecordingMocks | None = None,
           config: dict[str, Any] | None = None) -> RecordingMocks:
    """Runs ``build`` (which creates components) under mocks and waits for every registration."""
    mocks = mocks or RecordingMocks()
    _ensure_event_loop()
    pulumi.runtime.set_mocks(mocks, project="autoclusters", stack="test", preview=False)
    if config is not None:
        pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()})

    @pulumi.runtime.test
    def run() -> None:
        build()

    run()
    return mocks


def _ensure_event_loop() -> None:
    """Pulumi's mock engine runs on the thread's current event loop; an earlier
    ``asyncio.run`` in the same process (an aiohttp test, say) leaves none set."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        loop = None
    if loop is None or loop.is_closed():
        asyncio.set_event_loop(asyncio.new_event_loop())
