"""A small, dict-based facade over the kubernetes client.

Objects go in and come out as plain JSON dicts (no generated models), so the layers
above stay free of Kubernetes library types. Every write touches only the keys it names:
merge patches for labels, strategic-merge patches for our own conditions, and JSON
patches with a ``test`` of the resourceVersion where a list (taints) must be changed.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import orjson

from autoclusters.kube.errors import (
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    Throttled,
    Unavailable,
    from_status,
    lost_race,
    translated,
)
from autoclusters.kube.fence import READS, LeaseFence
from autoclusters.kube.json_patch import field_tests
from autoclusters.kube.request_counter import CONTROLLER, RequestCounter

JSON = dict[str, Any]
Items = list[JSON]  # for annotations inside Kube, where ``list`` names the method

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


# A request the API server's flow control refused (429, :class:`Throttled`) is sent again up to
# this many times, each after the answer's Retry-After (or THROTTLE_WAIT_S without one), as
# client-go does, while its waits stay within THROTTLE_BUDGET_S in all (the server asks for up
# to 32 s; a thread is not held that long, nor a write delayed past a lease); then the caller
# sees the error, with its Retry-After.
THROTTLE_RETRIES = 3
THROTTLE_WAIT_S = 1.0
THROTTLE_BUDGET_S = 5.0


class Kube:
    """One connection to one API server, used from many threads."""

    def __init__(self, api_client: Any, *, user_agent: str = "autoclusters",
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._api = api_client
        self.sleep = sleep  # how a throttled request waits out its Retry-After
        self.throttle_retries = THROTTLE_RETRIES
        self.throttle_budget = THROTTLE_BUDGET_S
        self._api.user_agent = user_agent
        self.requests = RequestCounter()
        self.component = CONTROLLER
        self.fence: LeaseFence | None = None  # asked before every write (``fenced``)
        self._discovery: dict[tuple[str, str], tuple[str, bool]] = {}
        # the lean transport's own path (kube.light): no URL built and taken apart again, no
        # header dicts merged, errors raised by name below it
        self._send: Callable[..., Any] | None = getattr(api_client, "send", None)

    def for_component(self, component: str, *, throttle_retries: int | None = None) -> Kube:
        """The same client (connections, request counter, discovery) whose requests are counted
        as ``component``'s: the controller hands these to its leader election and providers.
        ``throttle_retries``: this view's own (0: a throttled request fails at once)."""
        view = copy.copy(self)
        view.component = component
        if throttle_retries is not None:
            view.throttle_retries = throttle_retries
        return view

    def fenced(self, fence: LeaseFence) -> Kube:
        """The same client whose every write (any request but a read) is refused unless
        ``fence`` is open (:mod:`autoclusters.kube.fence`); the views made from it
        (``for_component``) carry the fence too."""
        view = copy.copy(self)
        view.fence = fence
        return view

    def unfenced(self) -> Kube:
        """The same client without a fence: only for the leader election, whose renewals open it."""
        view = copy.copy(self)
        view.fence = None
        return view

    def check_fence(self, what: str) -> None:
        """Raises ``Fenced`` when this client is fenced and the fence is closed: for a write that
        does not go through this client (a provider's own backend)."""
        if self.fence is not None:
            self.fence.check(what)

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    # --- the one generic call ------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] = 30,
        stream: bool = False,
    ) -> Any:
        q = [(k, v if not isinstance(v, bool) else str(v).lower()) for k, v in query.items()
             if v is not None] if query else None
        waited = 0.0
        for attempt in range(self.throttle_retries + 1):
            try:
                return self._request_once(method, path, query, q, body, content_type, timeout, stream)
            except Throttled as e:
                # API Priority and Fairness refused it before any handler read it: nothing was
                # done, so it is sent again once the server's Retry-After has passed, a few times
                # and within a budget; then the caller's own retry (the work queue's backoff, the
                # informer's, each no sooner than Retry-After) takes over.
                self.requests.add_throttled(method, path, query, component=self.component)
                wait = e.retry_after if e.retry_after is not None else THROTTLE_WAIT_S
                if attempt == self.throttle_retries or waited + wait > self.throttle_budget:
                    raise
                self.sleep(wait)
                waited += wait
        raise AssertionError("unreachable")

    def _request_once(self, method: str, path: str, query: dict[str, Any] | None, q: list[tuple[str, Any]] | None,
                      body: Any, content_type: str | None, timeout: float | tuple[float, float],
                      stream: bool) -> Any:
        # Checked before each send, a throttled write's retry included: its wait may outlast the lease.
        if method not in READS:
            self.check_fence(f"{method} {path}")
        self.requests.add(method, path, query, component=self.component)
        if self._send is not None:
            resp = self._send(method, path, q, body, content_type, timeout, stream)
            if stream:
                return resp.body
            return orjson.loads(resp.data) if resp.data else {}
        headers = {"Accept": "application/json"}
        if content_type or body is not None:
            headers["Content-Type"] = content_type or "application/json"
        with translated():
            m, url, hdrs, payload, _ = self._api.param_serialize(
                method=method.upper(), resource_path=path, query_params=q or None,
                header_params=headers, body=body, auth_settings=["BearerToken"],
            )
            if getattr(self._api, "takes_stream", False):  # the lean transport: told, not guessed from the URL
                resp = self._api.call_api(m, url, header_params=hdrs, body=payload, _request_timeout=timeout,
                                          stream=stream)
            else:
                resp = self._api.call_api(m, url, header_params=hdrs, body=payload, _request_timeout=timeout)
            if stream:
                if resp.status >= 300:
                    resp.read()
                    raise _api_error(resp)
                return resp.response
            resp.read()
            if resp.status >= 300:
                raise _api_error(resp)
            if not resp.data:
                return {}
            return orjson.loads(resp.data)

    # --- generic verbs ----------------------------------------------------------------
    def get(self, path: str, **query: Any) -> JSON:
        return self.request("GET", path, query=query)

    def list_items(self, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                   limit: int = 500) -> list[JSON]:
        """All items of a collection, following ``continue`` tokens."""
        items: Items = []
        cont: str | None = None
        while True:
            page = self.request("GET", path, query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                "limit": limit, "continue": cont})
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items

    def list_with_version(self, path: str, *, label_selector: str | None = None) -> tuple[Items, str]:
        page = self.request("GET", path, query={"labelSelector": label_selector})
        return page.get("items") or [], str((page.get("metadata") or {}).get("resourceVersion", ""))

    def create(self, path: str, body: JSON, **query: Any) -> JSON:
        return self.request("POST", path, body=body, query=query)

    def replace(self, path: str, body: JSON) -> JSON:
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: Any, patch_type: str = MERGE, **query: Any) -> JSON:
        return self.request("PATCH", path, body=body, content_type=patch_type, query=query)

    def delete(self, path: str, body: JSON | None = None, **query: Any) -> JSON:
        return self.request("DELETE", path, body=body, query=query)

    def watch(self, path: str, *, resource_version: str, label_selector: str | None = None,
              timeout_seconds: int = 300, gather_seconds: float = 0.0) -> Iterator[JSON]:
        """Yields watch events ``{"type", "object"}`` until the server ends the watch.
        ``gather_seconds``: events that come close together are read together, each waiting at
        most this long (the lean transport only; see ``connection._SocketReader``)."""
        resp = self.request("GET", path, query={
            "watch": True, "resourceVersion": resource_version, "labelSelector": label_selector,
            "timeoutSeconds": timeout_seconds, "allowWatchBookmarks": True},
            timeout=(10, timeout_seconds + 30), stream=True)
        if gather_seconds and (gather := getattr(resp, "gather", None)) is not None:
            gather(gather_seconds)
        buf = b""
        try:
            for chunk in resp.stream(65536, decode_content=True):
                buf = buf + chunk if buf else chunk
                start = 0
                while (end := buf.find(b"\n", start)) >= 0:  # each line decoded in place, no re-splitting
                    line = buf[start:end]
                    start = end + 1
                    if line.strip():
                        event = orjson.loads(line)
                        if event.get("type") == "ERROR":
                            obj = event.get("object") or {}
                            raise KubeError(str(obj.get("message", "watch error")), status=obj.get("code"))
                        yield event
                buf = buf[start:]
        except KubeError:
            raise
        except Exception as e:
            raise Unavailable(f"watch on {path} broke: {e}") from e
        finally:
            resp.release_conn()

    # --- any object by its apiVersion/kind (discovery-backed) -------------------------
    def resource_path(self, obj: JSON, *, with_name: bool = True) -> str:
        """The REST path of a manifest, found through API discovery (cached)."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural, namespaced = self._discover(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj.get("metadata") or {}
        if namespaced:
            base += f"/namespaces/{quote(meta.get('namespace') or 'default')}"
        base += f"/{plural}"
        return f"{base}/{quote(meta['name'])}" if with_name else base

    def _discover(self, api_version: str, kind: str) -> tuple[str, bool]:
        cache = self._discovery
        key = (api_version, kind)
        if key not in cache:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for r in self.get(path).get("resources", []):
                if "/" not in r["name"]:
                    cache[(api_version, r["kind"])] = (r["name"], bool(r.get("namespaced")))
        if key not in cache:
            raise KubeError(f"the API server does not serve {kind} in {api_version}")
        return cache[key]

    def forget_discovery(self) -> None:
        """Call after installing CRDs so new kinds are found."""
        self._discovery.clear()

    def apply(self, obj: JSON, *, field_manager: str = "autoclusters", force: bool = True) -> JSON:
        """Server-side apply of one manifest."""
        return self.request("PATCH", self.resource_path(obj), body=obj, content_type=APPLY,
                            query={"fieldManager": field_manager, "force": force})

    def delete_object(self, obj: JSON) -> None:
        """Deletes a manifest's object; absent is fine."""
        with contextlib.suppress(NotFound):
            self.delete(self.resource_path(obj), {"propagationPolicy": "Background"})

    # --- nodes ------------------------------------------------------------------------
    def get_node(self, name: str, *, timeout: float = 30) -> JSON:
        return self.request("GET", f"/api/v1/nodes/{quote(name)}", timeout=timeout)

    def list_nodes(self, label_selector: str | None = None) -> Items:
        return self.list_items("/api/v1/nodes", label_selector=label_selector)

    def patch_node(self, name: str, body: Any, patch_type: str = MERGE) -> JSON:
        return self.patch(f"/api/v1/nodes/{quote(name)}", body, patch_type)

    def patch_node_status(self, name: str, body: Any, patch_type: str = STRATEGIC, *, timeout: float = 30) -> JSON:
        return self.request("PATCH", f"/api/v1/nodes/{quote(name)}/status", body=body, content_type=patch_type,
                            timeout=timeout)

    def patch_node_guarded(self, node: JSON, ops_for: Callable[[JSON], Items], *, attempts: int = 5,
                           fields_only: bool = False) -> JSON:
        """A JSON patch of ``ops_for(node)`` guarded so that a concurrent writer is never
        overwritten: on a lost race the node is read again and the operations are computed anew.
        The guard tests the node's resourceVersion, or with ``fields_only`` only the values the
        operations depend on (:func:`~autoclusters.kube.json_patch.field_tests`), so a write to
        anything else (a status heartbeat, another controller's annotation) is not a lost race.
        Returns the node unchanged when there is nothing to do."""
        name = node["metadata"]["name"]
        for _ in range(attempts):
            ops = ops_for(node)
            if not ops:
                return node
            guard = field_tests(node, ops) if fields_only else None
            if guard is None:
                guard = [{"op": "test", "path": "/metadata/resourceVersion",
                          "value": node["metadata"]["resourceVersion"]}]
            try:
                return self.patch_node(name, [*guard, *ops], JSON_PATCH)
            except (Conflict, Invalid) as e:  # a failed `test` answers 422, a stale object 409
                if not lost_race(e):
                    raise  # an invalid patch or an admission policy's refusal: reading again cannot help
                node = self.get_node(name)
        raise Conflict(f"patching node {name}: still losing to concurrent writers after {attempts} attempts")

    # --- pods -------------------------------------------------------------------------
    def pods_on_node(self, node: str) -> Items:
        return self.list_items("/api/v1/pods", field_selector=f"spec.nodeName={node}")

    def evict(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        body: JSON = {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": name, "namespace": namespace}}
        if grace_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_seconds}
        self.create(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/eviction", body)

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
        self.delete(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", body)

    # --- custom resources --------------------------------------------------------------
    @staticmethod
    def custom_path(group: str, version: str, plural: str, name: str | None = None,
                    namespace: str | None = None) -> str:
        base = f"/apis/{group}/{version}"
        if namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{plural}"
        return f"{base}/{quote(name)}" if name else base


def _api_error(resp: Any) -> KubeError:
    headers = resp.getheaders() if hasattr(resp, "getheaders") else getattr(resp, "headers", None)
    retry_after = next((str(v) for k, v in (headers or {}).items() if str(k).lower() == "retry-after"), None)
    return from_status(resp.status or 0, resp.reason or "", resp.data, retry_after)
