"""The fields of a pool held to an operator's allow-list (``autoclusters/allow_lists.py``), and
why a pool may not be used: each field it gives that no entry of its list allows.

Which field is held to which list is written once: ``pool_fields.ALLOW_LISTED`` for the pool's
own spec, each provider setting's ``allow_list`` (``ProviderKind.allow_listed``) for the
providers'. The parser (``pools/pool_config.py``), the controller's pre-drain hook and the
tests' harness read these; the controller's provider builder asks each provider's own settings
(``providers/registry.py``) and the Rego is told the same table as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from autoclusters import pool_fields
from autoclusters.allow_lists import AllowList, AllowLists
from autoclusters.deploy.providers import KINDS, ProviderChoice

# The fields of the pool's own spec held to a list (the providers' are their settings' allow_list).
POOL_FIELDS: dict[str, AllowList] = {path: AllowList(kind) for path, kind in pool_fields.ALLOW_LISTED.items()}


def provider_fields(choice: ProviderChoice) -> Iterator[tuple[str, AllowList, Any]]:
    """(field path, list, value) of every provider setting of ``choice`` held to a list."""
    for action, spec in (("", choice.default), *choice.own.items()):
        if spec is None:
            continue
        prefix = f"spec.provider.{action}." if action else "spec.provider."
        for name, kind, value in KINDS[spec.type].allow_listed(spec.settings):
            yield f"{prefix}{spec.type}.{name}", AllowList(kind), value


def named_fields(*, provider: ProviderChoice, hook_url: str = "", hook_command: tuple[str, ...] = ()
                 ) -> list[tuple[str, AllowList, Any]]:
    """(field path, list, value) of every field a pool gives that is held to a list."""
    given: list[tuple[str, AllowList, Any]] = []
    if hook_command:
        given.append(("spec.preDrain.hook.command", POOL_FIELDS["preDrain.hook.command"], tuple(hook_command)))
    if hook_url:
        given.append(("spec.preDrain.hook.url", POOL_FIELDS["preDrain.hook.url"], hook_url))
    given += ((where, kind, tuple(v) if isinstance(v, list) else v) for where, kind, v in provider_fields(provider))
    return given


def listing(fields: Iterable[tuple[str, AllowList, Any]]) -> AllowLists:
    """Allow-lists with an entry for each of ``fields`` (what an operator writes to allow a pool)."""
    lists: dict[str, dict[str, Any]] = {kind.value: {} for kind in AllowList}
    for _, kind, value in fields:
        if value not in lists[kind.value].values():
            lists[kind.value][f"entry-{len(lists[kind.value])}"] = value
    return AllowLists(**lists)


def pool_refusals(lists: AllowLists, *, provider: ProviderChoice, hook_url: str = "",
                  hook_command: tuple[str, ...] = ()) -> list[str]:
    """Why a pool may not be used: each field it gives that no entry of its list allows."""
    given = named_fields(provider=provider, hook_url=hook_url, hook_command=hook_command)
    return [why for where, kind, value in given if (why := lists.refusal(kind, value, where))]
