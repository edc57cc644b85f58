"""Where each stack setting is set on each install surface: the docs' table of issue 29 item 3,
derived from the declarations themselves, so it cannot say what the code does not do.

* Pulumi: every key of ``deploy.stack_config.STACK_SETTINGS`` is ``autoclusters:<key>``.
* Helm: the chart's value keys (``components.chart.value_keys``: the values and the variants),
  the pools' chart (``components/pools_chart.py``), or a chart rendered with one's own
  settings (``components.render --config F --out DIR`` writes ``DIR/chart``) for what
  ``chart.LEFT_OUT`` leaves out, with its reason.
* kustomize: a component of ``manifests/components/`` (``kustomize_components.TOGGLES``), the
  image override of ``examples/kustomize/registry/``, ``manifests/pools/``, or a patch of one's
  own (a value in place) or a render of one's own (``--config``) for the rest.

``python -m components.settings_surfaces docs/deploy.md`` writes the table (make manifests);
a unit test holds the page to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoclusters.deploy.stack_config import STACK_SETTINGS
from components import kustomize_components
from components.chart import LEFT_OUT, value_keys
from components.render import OVERLAYS

DOCS_MARKER = "<!-- settings-surfaces-table"
OWN_CHART = "a chart of your own settings (`--config F --out DIR`: `DIR/chart`)"
OWN_RENDER = "a render of your own (`components.render --config F --out DIR`)"
POOLS = "pools"
# settings only the local kwok cluster's stack has (LEFT_OUT says so): no install surface
LOCAL_ONLY = ("local", "webhookUrl")


def left_out() -> dict[str, str]:
    """Each setting (``a`` or ``a.b``) the chart leaves out, with the reason."""
    return {name.strip(): why for names, why in LEFT_OUT.items() for name in names.split(",")}


def _overlay_images() -> dict[str, str]:
    """The image settings an example overlay moves with kustomize's own ``images:``."""
    out = {}
    for name, overlay in OVERLAYS.items():
        if overlay.get("images"):
            out.update({key: f"`images:` (`examples/kustomize/{name}/`)" for key in ("image", "opaImage")})
    return out


def helm(setting: str) -> str:
    if setting == POOLS:
        return "`pools` of the pools' chart (`charts/autoclusters-pools`)"
    if setting in LOCAL_ONLY:
        return "-"
    values = [k for k in value_keys() if k.path[0] == setting]
    out = []
    if len(values) == 1 and values[0].path == (setting,):
        out.append(f"`{setting}`")
    elif values:
        subs = list(dict.fromkeys(k.path[1] for k in values))
        deeper = any(len(k.path) > 2 for k in values)
        if len(subs) > 4 and not deeper:  # a table of its own in the docs (the controller's flags)
            out.append(f"`{setting}.<key>`, each of its {len(subs)} keys")
        else:
            out.append(", ".join(f"`{setting}.{s}{'.<key>' if deeper else ''}`" for s in subs))
    left = {name: why for name, why in left_out().items() if name == setting or name.startswith(setting + ".")}
    out += [f"{OWN_CHART}{'' if name == setting else f' for `{name}`'}: {why}" for name, why in left.items()]
    return "; ".join(out)


def kustomize(setting: str) -> str:
    if setting in LOCAL_ONLY:
        return "-"
    if setting == POOLS:
        return "`manifests/pools/` (or your own pools)"
    ways = [f"component `{t.name}` ({_inline(t.settings)})" for t in kustomize_components.TOGGLES
            if setting in t.settings and len(t.settings) == 1]
    images = _overlay_images()
    if setting in images:
        ways.append(images[setting])
    ways.append(OWN_RENDER if ways or setting in left_out() else f"a patch of your own, or {OWN_RENDER}")
    return "; ".join(ways)


def _inline(settings: Mapping[str, Any]) -> str:
    return "`" + kustomize_components.inline(settings) + "`"


def docs_table() -> str:
    lines = ["| Pulumi (stack setting) | Helm | kustomize |", "|---|---|---|"]
    lines += [f"| `autoclusters:{s}` | {helm(s)} | {kustomize(s)} |" for s in STACK_SETTINGS]
    return "\n".join(lines)


if __name__ == "__main__":  # make manifests: python -m components.settings_surfaces docs/deploy.md
    import sys

    from autoclusters import doc_tables

    doc_tables.rewrite(sys.argv[1], DOCS_MARKER, docs_table())
