"""Storage-version migration of our two CRDs, done once by the leader when it starts.

After an upgrade moves a CRD's storage version (``api.VERSION``) on, objects written before
stay in etcd at the old version, and the CRD's ``status.storedVersions`` keeps naming it: that
version cannot be dropped from the CRD until every object is rewritten (the API server refuses
a CRD whose storedVersions names a version it no longer has). So, for each CRD whose
storedVersions holds more than ``api.VERSION``, and only once the CRD stores at ``api.VERSION``:

1. list its objects (at ``api.VERSION``) and write each back unchanged (a PUT of the object as
   read): the API server encodes it at the storage version, so the bytes differ from those
   stored and it writes them (its no-op short cut compares encoded bytes). A conflict means
   someone wrote the object since the list, which stored it at the new version too; a vanished
   object needs nothing;
2. when every object was written, set storedVersions to ``[api.VERSION]`` (a JSON patch that
   tests the value it read, so a concurrent change of the CRD is not overwritten).

Each CRD's result is logged and an event on the CRD says it (``StorageVersionMigrated``, or
the warning ``StorageVersionMigrationFailed`` naming the objects that could not be written;
the next leader's start tries again). docs/deploy.md, "Upgrading", says what an operator sees.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from autoclusters import api
from autoclusters.kube import Conflict, Kube, KubeError, NotFound
from autoclusters.kube.client import JSON_PATCH
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.names import Names

log = logging.getLogger(__name__)

CRD_API = "apiextensions.k8s.io/v1"
CRDS_PATH = f"/apis/{CRD_API}/customresourcedefinitions"
MIGRATED, FAILED = "StorageVersionMigrated", "StorageVersionMigrationFailed"
MAX_NAMED = 5  # objects named in a failure's event


@dataclass
class Migration:
    """What one CRD's migration did."""

    crd: str
    stored_before: list[str] = field(default_factory=list)
    rewritten: int = 0
    failed: list[str] = field(default_factory=list)
    trimmed: bool = False
    skipped: str = ""  # why nothing was listed ("" when it ran)


def migrate_storage(kube: Kube, names: Names, recorder: EventRecorder | None = None,
                    resources: tuple[api.Resource, ...] = (api.POOLS, api.REMEDIATIONS)) -> list[Migration]:
    """Migrates each of ``resources`` (see the module's docstring); never raises a KubeError."""
    return [_migrate(kube, names, recorder, r) for r in resources]


def _migrate(kube: Kube, names: Names, recorder: EventRecorder | None, resource: api.Resource) -> Migration:
    done = Migration(names.crd_name(resource))
    try:
        crd = kube.get(f"{CRDS_PATH}/{done.crd}")
    except KubeError as e:
        done.skipped = f"the CRD could not be read: {e}"
        log.warning("storage migration of %s skipped: %s", done.crd, done.skipped)
        return done
    done.stored_before = list((crd.get("status") or {}).get("storedVersions") or [])
    storage = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
    if storage != [api.VERSION]:
        done.skipped = (f"the CRD stores at {', '.join(storage)}, this controller at {api.VERSION}: "
                        "apply the new CRDs (docs/deploy.md, \"Upgrading\")")
        log.warning("storage migration of %s skipped: %s", done.crd, done.skipped)
        return done
    if done.stored_before == [api.VERSION]:
        done.skipped = "nothing stored at another version"
        return done
    path = Kube.custom_path(names.api_group, api.VERSION, resource.plural)
    try:
        objects = kube.list_items(path)
    except KubeError as e:
        done.failed.append(f"(the list: {e})")
        objects = []
    for obj in objects:
        name = obj["metadata"]["name"]
        try:
            kube.replace(f"{path}/{name}", obj)
            done.rewritten += 1
        except (Conflict, NotFound):
            done.rewritten += 1  # written by someone else since the list (so at api.VERSION), or gone
        except KubeError as e:
            done.failed.append(f"{name} ({e})")
    if not done.failed:
        try:
            kube.patch(f"{CRDS_PATH}/{done.crd}/status", [
                {"op": "test", "path": "/status/storedVersions", "value": done.stored_before},
                {"op": "replace", "path": "/status/storedVersions", "value": [api.VERSION]}], JSON_PATCH)
            done.trimmed = True
        except KubeError as e:
            done.failed.append(f"(storedVersions: {e})")
    _report(done, crd, recorder)
    return done


def _report(done: Migration, crd: dict[str, Any], recorder: EventRecorder | None) -> None:
    ref = ObjectRef("CustomResourceDefinition", done.crd, api_version=CRD_API, uid=crd["metadata"].get("uid", ""))
    before = ", ".join(done.stored_before)
    if done.trimmed:
        message = (f"{done.rewritten} objects rewritten at {api.VERSION}; storedVersions {before} -> "
                   f"{api.VERSION}")
        log.info("storage migration of %s: %s", done.crd, message)
        if recorder is not None:
            recorder.emit(ref, MIGRATED, message)
        return
    named = ", ".join(done.failed[:MAX_NAMED]) + (f" and {len(done.failed) - MAX_NAMED} more"
                                                  if len(done.failed) > MAX_NAMED else "")
    message = (f"{done.rewritten} objects rewritten at {api.VERSION}, not written: {named}; storedVersions "
               f"stays {before} (the next leader tries again)")
    log.warning("storage migration of %s: %s", done.crd, message)
    if recorder is not None:
        recorder.emit(ref, FAILED, message, warning=True)
