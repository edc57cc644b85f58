"""The cluster default policy: GPU nodes whose pool label names no ``GpuNodePool``.

A node labelled ``<domain>/nodepool.name=X`` where no GpuNodePool X exists (and no pool's
``nodeSelector`` claims it) is handled as a member of pool X under this policy. It lives
in a ConfigMap, ``autoclusters-default-pool`` in the controller's namespace (key ``spec``: a
``GpuNodePool.spec`` in JSON, without ``nodeSelector``), which the stack writes from
``autoclusters:defaultPool``; the controller watches it and ``autoclusters status`` shows it.

Without the ConfigMap the reference default applies: consent mode ``auto``, the pool
defaults for limits and timings, and no provider, so faults are reported and nodes marked
while repairs are held until a provider is named. ``consentMode: off`` reports only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from autoclusters import api
from autoclusters.pools.pool_config import PoolConfigError, pool_from_config

CONFIGMAP = "autoclusters-default-pool"
KEY = "spec"
LABEL = {"app.kubernetes.io/name": CONFIGMAP, "app.kubernetes.io/part-of": "autoclusters"}
SELECTOR = f"app.kubernetes.io/name={CONFIGMAP}"
# = StackConfig().default_pool (a test says)
REFERENCE_DEFAULT: Mapping[str, Any] = {"consentMode": api.DEFAULT_CONSENT_MODE.value}
NOT_ALLOWED = ("name", "nodeSelector", "nodes")  # keys of a pool that the default policy has not


def check_spec(spec: Any) -> dict[str, Any]:
    """The default policy's spec, checked with the pool parser; PoolConfigError names the field."""
    if not isinstance(spec, Mapping):
        raise PoolConfigError(f"defaultPool must be a mapping (a GpuNodePool spec), got {type(spec).__name__}")
    bad = [k for k in NOT_ALLOWED if k in spec]
    if bad:
        raise PoolConfigError(f"defaultPool: {', '.join(bad)} do not apply to the default policy "
                              "(it covers the nodes whose pool label names no GpuNodePool)")
    pool_from_config({"name": "default", **spec})
    return dict(spec)


def spec_of(configmap: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    """(the spec in force, why the ConfigMap's spec was not used or ""). A ConfigMap that
    cannot be read leaves the reference default in force, with the error to show."""
    if configmap is None:
        return dict(REFERENCE_DEFAULT), ""
    raw = (configmap.get("data") or {}).get(KEY)
    if raw is None:
        return dict(REFERENCE_DEFAULT), f"ConfigMap {CONFIGMAP} has no key {KEY!r}"
    try:
        return check_spec(json.loads(raw)), ""
    except json.JSONDecodeError as e:
        return dict(REFERENCE_DEFAULT), f"ConfigMap {CONFIGMAP} key {KEY!r} is not JSON: {e}"
    except PoolConfigError as e:
        return dict(REFERENCE_DEFAULT), f"ConfigMap {CONFIGMAP}: {e}"


def configmap(spec: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The ConfigMap of the default policy. Its JSON is sorted, compact and UTF-8: the text Helm's
    ``toJson`` writes, so the chart's ``defaultPool`` value renders what the stack renders; an
    empty spec (every pool default) is written as the reference default it equals, as Helm writes
    its unset ``{}``."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": namespace, "labels": dict(LABEL)},
            "data": {KEY: json.dumps(check_spec(spec) or dict(REFERENCE_DEFAULT), sort_keys=True, separators=(",", ":"),
                                         ensure_ascii=False)}}
