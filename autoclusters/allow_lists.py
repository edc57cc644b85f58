"""The operator's allow-lists: the commands, images and URLs a pool may name.

A pool's author chooses *when* a node is repaired; what runs code or reaches the network on
the way (a ``command`` provider's program, a pre-drain hook's command or URL, the host-reboot
Job's image) is the cluster operator's choice. The operator lists the entries once, by name,
in the stack setting ``autoclusters:allowLists`` (rendered into the controller's
``--allow-lists`` and the pool policy's ``data.autoclusters.config.allowLists``)::

    allowLists:
      commands: {replace-node: [/opt/replace-node, --fast]}
      images: {reboot: registry.example/reboot:1.4}
      urls: {drain-notice: https://ops.example/drain}

A pool keeps writing the value itself (``provider.command.command``, ``preDrain.hook.url``...):
it is refused unless it equals an entry of the list (docs/admission.md, "Who may write pools",
says why the value and not the entry's name). Empty lists, the default, allow none of them:
an installation that names no entry runs no pool author's program, image or URL. The
host-reboot Job's default image, the controller's own, needs no entry.

Which field of a pool is held to which list is written once: ``pool_fields.ALLOW_LISTED`` for
the fields of the pool's own spec, and each provider setting's ``allow_list`` (its module's ``KIND``) for
the providers' (a new provider's URL or command setting names its list there and is checked
by the pool's checks, the controller and the Rego alike). This module is the document alone
(its lists, its parser, the one refusal); which fields of a pool it holds, and the pool's
refusals, are ``pools/allow_listed.py``'s: the document stands below the providers, whose
build context carries it, and the checks above them, since they read the provider registry.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters.redact import redact


class AllowList(enum.StrEnum):
    """The three lists; each entry of ``commands`` is an argv, of the others a string."""

    COMMANDS = "commands"
    IMAGES = "images"
    URLS = "urls"


STACK_SETTING = "allowLists"  # autoclusters:allowLists
FLAG = "--allow-lists"  # autoclusters controller run / webhook run: the same document as JSON
_ENTRY_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class AllowListError(ValueError):
    """An allow-list document that cannot be used; the message names the entry."""


@dataclass(frozen=True)
class AllowLists:
    """The entries of each list by name (commands: argv tuples; images, URLs: strings)."""

    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    images: Mapping[str, str] = field(default_factory=dict)
    urls: Mapping[str, str] = field(default_factory=dict)

    def entries(self, kind: AllowList) -> Mapping[str, Any]:
        return dict(getattr(self, kind.value))

    def allows(self, kind: AllowList, value: Any) -> bool:
        if kind == AllowList.COMMANDS:
            value = tuple(value) if isinstance(value, list | tuple) else value
        return value in self.entries(kind).values()

    def refusal(self, kind: AllowList, value: Any, where: str) -> str:
        """Why ``value`` of field ``where`` may not be used ("" when it may)."""
        if self.allows(kind, value):
            return ""
        shown = redact(" ".join(value) if isinstance(value, list | tuple) else str(value))
        names = ", ".join(sorted(self.entries(kind))) or "none"
        return (f"{where} {shown!r} is not an entry of the allow-list {STACK_SETTING}.{kind.value} (the stack "
                f"setting autoclusters:{STACK_SETTING}, the controller's {FLAG}; its entries: {names})")

    def to_config(self) -> dict[str, Any]:
        """The document as the stack setting writes it (and as ``from_config`` reads it)."""
        return {AllowList.COMMANDS.value: {k: list(v) for k, v in sorted(self.commands.items())},
                AllowList.IMAGES.value: dict(sorted(self.images.items())),
                AllowList.URLS.value: dict(sorted(self.urls.items()))}

    def flag_value(self) -> str:
        return json.dumps(self.to_config(), sort_keys=True, separators=(",", ":"))

    @property
    def empty(self) -> bool:
        return not (self.commands or self.images or self.urls)


NONE = AllowLists()


def from_config(raw: Any, where: str = STACK_SETTING) -> AllowLists:
    """Strict: raises AllowListError naming the list and the entry. ``None``: no entries."""
    if raw is None:
        return NONE
    if isinstance(raw, str):  # the flag's JSON, or a `pulumi config set` string
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            raise AllowListError(f"{where} is not JSON: {e}") from None
    if not isinstance(raw, Mapping):
        raise AllowListError(f"{where} must be a mapping of {', '.join(AllowList)}, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in set(raw) - {k.value for k in AllowList})
    if unknown:
        raise AllowListError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(AllowList)}")
    lists: dict[str, dict[str, Any]] = {}
    for kind in AllowList:
        entries = raw.get(kind.value) or {}
        if not isinstance(entries, Mapping):
            raise AllowListError(f"{where}.{kind.value} must be a mapping of entry names to values")
        checked: dict[str, Any] = {}
        for name, value in entries.items():
            here = f"{where}.{kind.value}.{name}"
            if not isinstance(name, str) or not _ENTRY_NAME.match(name):
                raise AllowListError(f"{where}.{kind.value}: entry name {name!r} must be a DNS label")
            if kind == AllowList.COMMANDS:
                if isinstance(value, str) or not isinstance(value, list | tuple) or not value or not all(
                        isinstance(a, str) and a for a in value):
                    raise AllowListError(f"{here} must be a non-empty list of non-empty strings (the argv)")
                checked[name] = tuple(value)
            elif not isinstance(value, str) or not value or any(c.isspace() for c in value):
                raise AllowListError(f"{here} must be a non-empty string without spaces")
            elif kind == AllowList.URLS and not re.match(r"^https?://\S+$", value):
                raise AllowListError(f"{here} must be an http:// or https:// URL")
            else:
                checked[name] = value
        lists[kind.value] = checked
    return AllowLists(**lists)
