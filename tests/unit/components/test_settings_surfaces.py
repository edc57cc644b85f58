"""The docs' table of where each stack setting is set (components/settings_surfaces.py): every
setting has a way on each surface (the local cluster's own settings aside), the table is derived
from the declarations, and docs/deploy.md holds it as generated."""

from __future__ import annotations

from pathlib import Path

from autoclusters import doc_tables
from autoclusters.deploy.stack_config import STACK_SETTINGS
from components import chart, kustomize_components, settings_surfaces

DEPLOY = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"


def test_every_setting_has_a_way_on_every_surface() -> None:
    for setting in STACK_SETTINGS:
        if setting in settings_surfaces.LOCAL_ONLY:
            continue
        assert settings_surfaces.helm(setting) not in ("", "-"), setting
        assert settings_surfaces.kustomize(setting) not in ("", "-"), setting


def test_the_local_only_settings_are_what_the_chart_leaves_out_as_the_local_clusters() -> None:
    local = [names for names, why in chart.LEFT_OUT.items() if "local kwok cluster" in why]
    assert [n.strip() for names in local for n in names.split(",")] == list(settings_surfaces.LOCAL_ONLY)


def test_the_helm_column_names_every_value_and_every_left_out_setting() -> None:
    table = settings_surfaces.docs_table()
    for key in chart.value_keys():
        shown = (f"`{key.dotted}`", f"`{key.path[0]}.<key>`", f"`{'.'.join(key.path[:2])}.<key>`")
        assert any(s in table for s in shown), key.dotted
    for name, why in settings_surfaces.left_out().items():
        if name not in settings_surfaces.LOCAL_ONLY and name != settings_surfaces.POOLS:
            assert why in table, name


def test_the_kustomize_column_names_every_single_setting_component() -> None:
    table = settings_surfaces.docs_table()
    for toggle in kustomize_components.TOGGLES:
        if len(toggle.settings) == 1:
            assert f"component `{toggle.name}`" in table


def test_the_docs_table_is_generated() -> None:
    page = DEPLOY.read_text()
    assert page == doc_tables.with_table(page, settings_surfaces.DOCS_MARKER, settings_surfaces.docs_table()), \
        "docs/deploy.md's settings surfaces table is stale: make manifests"
