"""Renders ``manifests/`` from the components, for users who apply with kubectl or GitOps.

``python -m components.render`` rewrites the files; ``--check`` exits 1 when the committed
files differ from what the components produce now (the unit tests run the same check).
``--domain`` / ``--condition-prefix`` / ``--event-source`` render a set for another brand
(e.g. ``crusoe.ai`` / ``Crusoe`` / ``nodepool-service``) into its own folder
(``build/manifests/<domain>-<prefix>/`` unless ``--out`` says where); ``manifests/`` always
holds the default names.
The objects are ``autoclusters.deploy.stack.stack_objects``: the list the components register
(a unit test runs them under Pulumi's mock engine and compares), so Pulumi and the YAML
cannot drift. Left out: the webhook's TLS Secret (a private key does not belong in
git; docs/deploy.md shows how cert-manager provides it and the caBundle).

``charts/autoclusters`` is the Helm chart of the same objects (components/chart.py), written
and checked with them; so are ``manifests/components/<name>/``, the kustomize Components of the
settings that change the objects' structure (``kernelLogSource: journal``, ``nvml: {enabled:
false}``, ``monitoring: {prometheusOperator: true}``; components/kustomize_components.py, whose
``TOGGLES`` lists them), and the example overlays of ``examples/kustomize/``.

``monitoring/prometheus-operator.yaml`` holds the objects of the stack setting
``monitoring: {prometheusOperator: true}`` (PodMonitors, PrometheusRule), outside
``manifests/`` so that a cluster without the operator's CRDs applies ``manifests/`` as it is
(the component ``prometheus-operator`` adds the same objects to a kustomization; a ``--config``
render with the setting writes them into its ``06-prometheus-operator.yaml``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from autoclusters import __version__, api
from autoclusters.deploy import IMAGE_REPOSITORY
from autoclusters.deploy.monitoring import Monitoring, monitoring_objects
from autoclusters.deploy.reboot_job import OWN_IMAGE_VARIABLE
from autoclusters.deploy.stack import JOB_SHAPE_POLICY, stack_objects
from autoclusters.deploy.stack_config import StackConfig, stack_config_from_dict
from autoclusters.deploy.workloads import CONTROLLER, CONTROLLER_CONTAINER
from autoclusters.pools.pool_config import PoolConfigError
from components import kustomize_components
from components.chart import Unmappable, render_chart, render_time_settings
from components.manifest_objects import (
    GITOPS_POOL_ANNOTATIONS,
    GITOPS_PROVIDERS,
    HEADER,
    file_for,
    file_order,
    manifest,
    yaml_documents,
    yaml_text,
)
from components.pools_chart import render_pools_chart

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
MONITORING = ROOT / "monitoring" / "prometheus-operator.yaml"
CHART = ROOT / "charts" / "autoclusters"  # the Helm chart (components/chart.py)
POOLS_CHART = ROOT / "charts" / "autoclusters-pools"  # the pools' chart (components/pools_chart.py)
KUSTOMIZE_COMPONENTS = MANIFESTS / kustomize_components.FOLDER  # components/kustomize_components.py
OVERLAYS_DIR = ROOT / "examples" / "kustomize"
# Example pools a GitOps repository would start from: one per consent mode, each naming its
# providers (a pool that names none reports faults but holds every repair).
EXAMPLE_POOLS: list[dict[str, Any]] = [
    {"name": "a100", "consentMode": "propose",
     "provider": {"type": "clusterapi", "reset": {"type": "hostReboot"}}},
    {"name": "h100", "consentMode": "auto", "faultClasses": {"interconnect": "reset"}, "maxConcurrentRepairs": 2,
     "provider": {"type": "hostReboot"}},
]
# kustomize: the base (the system), the pools, and the example overlays (docs/deploy.md)
KUSTOMIZATION = "kustomization.yaml"
POOLS_KUSTOMIZATION = "pools/kustomization.yaml"
_DEFAULTS = StackConfig()
# An overlay that moves the image carries it into the reboot Job policy's own image too
# (deploy/reboot_job.py: a CEL string literal, the part between its quotes)
OWN_IMAGE_REPLACEMENT: dict[str, Any] = {
    "source": {"kind": "Deployment", "name": CONTROLLER,
               "fieldPath": f"spec.template.spec.containers.[name={CONTROLLER_CONTAINER}].image"},
    "targets": [{"select": {"kind": "ValidatingAdmissionPolicy", "name": JOB_SHAPE_POLICY},
                 "fieldPaths": [f"spec.variables.[name={OWN_IMAGE_VARIABLE}].expression"],
                 "options": {"delimiter": "'", "index": 1}}]}
_MONITORED = kustomize_components.PROMETHEUS_OPERATOR.name
OVERLAYS: dict[str, dict[str, Any]] = {
    # your registry for both images: every reference follows, the reboot Job's too (its image
    # is the controller's own, read from its pod: controller/own_image.py)
    "registry": {"resources": ["../../../manifests"], "images": [
        {"name": IMAGE_REPOSITORY, "newName": "registry.example.com/autoclusters/autoclusters",
         "newTag": __version__},
        {"name": _DEFAULTS.opa_image.rsplit(":", 1)[0], "newName": "registry.example.com/openpolicyagent/opa",
         "newTag": _DEFAULTS.opa_image.rsplit(":", 1)[1]}],
        "replacements": [OWN_IMAGE_REPLACEMENT]},
    # the system and the pools in one sync, for Argo CD (the pools' sync wave follows the
    # webhook's) or Flux (which applies the CRDs first and retries the pools)
    "gitops": {"resources": ["../../../manifests", "../../../manifests/pools"]},
    # the system with the Prometheus Operator's objects: a component over the base (docs/deploy.md)
    _MONITORED: {"resources": ["../../../manifests"],
                 "components": [f"../../../manifests/{kustomize_components.FOLDER}/{_MONITORED}"]},
}
def render(brand: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Relative path → YAML text of every manifest file; ``brand`` holds stack-config keys that
    differ from the defaults (a brand's ``domain``, ``conditionPrefix``, ``eventSource``, or a
    whole configuration: ``--config``); the example pools unless it names ``pools``."""
    # GitOps manifests grant the controller every provider's rights (docs/deploy.md says how to narrow)
    config = stack_config_from_dict({"pools": EXAMPLE_POOLS, "controllerProviders": GITOPS_PROVIDERS, **(brand or {})})
    files: dict[str, list[dict[str, Any]]] = {}
    for obj in map(manifest, stack_objects(config)):
        path = file_for(obj)
        if not path:
            continue
        if obj["kind"] == api.POOLS.kind:
            obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), **GITOPS_POOL_ANNOTATIONS}
        files.setdefault(path, []).append(obj)
    out = {path: HEADER + yaml_documents(sorted(objs, key=file_order)) for path, objs in sorted(files.items())}
    return {**out, **kustomizations(sorted(out))}


def kustomizations(paths: list[str]) -> dict[str, str]:
    """The kustomize files over the rendered ones (issue 29): ``manifests/`` is the base (the
    system), ``manifests/pools/`` the pools (a kubectl run cannot create a custom resource
    whose CRD it creates: docs/deploy.md, "The GitOps path"), and the example overlays."""
    system = [p for p in paths if "/" not in p]
    pools = [p.split("/", 1)[1] for p in paths if p.startswith("pools/")]
    return {KUSTOMIZATION: _kustomization_text(system), POOLS_KUSTOMIZATION: _kustomization_text(pools)}


def render_overlays() -> dict[str, str]:
    """``examples/kustomize/<name>/kustomization.yaml``: the example overlays over ``manifests/``
    (outside it: kustomize refuses an overlay inside its own base's folder)."""
    return {f"{name}/{KUSTOMIZATION}": _kustomization_text(**overlay) for name, overlay in OVERLAYS.items()}


def _kustomization_text(resources: list[str], **rest: Any) -> str:
    return HEADER + yaml_text(_kustomization(resources, **rest))


def _kustomization(resources: list[str], **rest: Any) -> dict[str, Any]:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources,
            **rest}


def render_monitoring() -> str:
    """``monitoring/prometheus-operator.yaml``: the Prometheus Operator's objects, default names."""
    defaults = StackConfig()
    objs = [manifest(o) for o in monitoring_objects(Monitoring(prometheus_operator=True), defaults.namespace,
                                                    defaults.names)]
    return HEADER + yaml_documents(objs)


def stale(root: Path = MANIFESTS, monitoring: Path = MONITORING, overlays: Path = OVERLAYS_DIR,
          chart: Path = CHART, pools_chart: Path = POOLS_CHART,
          components: Path = KUSTOMIZE_COMPONENTS) -> list[str]:
    """Paths under ``root`` that differ from a fresh render (missing, changed or extra), and
    the monitoring file's, the overlays', the Helm charts' and the kustomize components' paths
    that differ (the last three: extra files too)."""
    fresh = render()
    out = [p for p, text in fresh.items() if not (root / p).exists() or (root / p).read_text() != text]
    out += [str(p.relative_to(root)) for p in root.rglob("*.yaml")
            if str(p.relative_to(root)) not in fresh and not p.is_relative_to(root / kustomize_components.FOLDER)]
    generated = {monitoring: render_monitoring(), **{overlays / p: text for p, text in render_overlays().items()}}
    extra: list[Path] = []
    for tree, files in ((chart, render_chart()), (pools_chart, render_pools_chart()),
                        (components, kustomize_components.render_components())):
        generated.update({tree / p: text for p, text in files.items()})
        extra += [p for p in tree.rglob("*") if p.is_file() and str(p.relative_to(tree)) not in files] \
            if tree.exists() else []
    out += [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
            for p, text in generated.items() if not p.exists() or p.read_text() != text]
    out += [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in extra]
    return sorted(out)


def write_tree(files: dict[str, str], root: Path = CHART) -> None:
    """Replaces every file under ``root`` (the chart's, the kustomize components') with ``files``."""
    if root.exists():
        for p in sorted(root.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    print(f"wrote {root.relative_to(ROOT) if root.is_relative_to(ROOT) else root}/ ({len(files)} files)")


def stack_settings_file(path: Path) -> dict[str, Any]:
    """The ``autoclusters`` settings of a stack file (``config: {autoclusters:pods: ...}``, as
    ``Pulumi.<stack>.yaml`` holds them) or of a plain YAML map of those keys."""
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError("must be a YAML map")
    if isinstance(data.get("config"), dict):
        return {k.split(":", 1)[1]: v for k, v in data["config"].items() if k.startswith("autoclusters:")}
    return data


def brand_dir(config: StackConfig) -> Path:
    return ROOT / "build" / "manifests" / f"{config.domain}-{config.condition_prefix}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if manifests/ is stale")
    parser.add_argument("--domain", help="render a set with this label domain (e.g. crusoe.ai)")
    parser.add_argument("--condition-prefix", help="... and this condition prefix (e.g. Crusoe)")
    parser.add_argument("--event-source", help="... and this event source (e.g. nodepool-service)")
    parser.add_argument("--config", type=Path, help="render from this stack configuration: a Pulumi stack file "
                        "(its autoclusters:* keys) or a YAML map of those keys without the prefix")
    parser.add_argument("--out", type=Path, help="folder of that set (default build/manifests/<domain>-<prefix>)")
    args = parser.parse_args(argv)
    brand: dict[str, Any] = {k: v for k, v in (("domain", args.domain), ("conditionPrefix", args.condition_prefix),
                                               ("eventSource", args.event_source)) if v}
    if args.config:
        try:
            brand = {**stack_settings_file(args.config), **brand}
        except (OSError, yaml.YAMLError, ValueError) as e:
            parser.error(f"--config {args.config}: {e}")
    if brand or args.out:
        if args.check:
            parser.error("--check compares manifests/, which holds the default names")
        try:
            config = stack_config_from_dict(brand)
        except PoolConfigError as e:
            parser.error(str(e))
        out = (args.out or brand_dir(config)).resolve()
        if out == MANIFESTS.resolve():
            parser.error("manifests/ holds the default names; render a brand into another folder")
        try:
            files = render(brand)
        except ValueError as e:  # a setting the objects cannot take (deploy.pod_settings)
            parser.error(str(e))
        write(files, out)
        try:  # the same settings as a Helm chart of their own: the values' keys stay values
            write_tree(render_chart(brand), out / "chart")
            write_tree(render_pools_chart(render_time_settings(brand)), out / "pools-chart")
        except Unmappable as e:
            parser.error(f"the chart cannot be rendered from these settings: {e}")
        return 0
    if args.check:
        bad = stale()
        for name in bad:
            outside = name.startswith(("monitoring/", "examples/", "charts/", "manifests/"))  # from the root
            shown = name if outside else "manifests/" + name
            print(f"stale: {shown}", file=sys.stderr)
        return 1 if bad else 0
    write(render(), MANIFESTS)
    MONITORING.write_text(render_monitoring())
    print(f"wrote {MONITORING.relative_to(ROOT)}")
    write(render_overlays(), OVERLAYS_DIR)
    write_tree(render_chart())
    write_tree(render_pools_chart(), POOLS_CHART)
    write_tree(kustomize_components.render_components(), KUSTOMIZE_COMPONENTS)
    return 0


def write(files: dict[str, str], root: Path) -> None:
    """Replaces the YAML files under ``root`` with ``files``."""
    for p in root.rglob("*.yaml"):
        p.unlink()
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        shown = root.relative_to(ROOT) if root.is_relative_to(ROOT) else root
        print(f"wrote {shown}/{path}")


if __name__ == "__main__":
    sys.exit(main())
