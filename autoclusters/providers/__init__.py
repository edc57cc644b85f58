"""Node lifecycle backends: how a node is reset or replaced (docs/contract.md, "Providers").

Each provider is driven by the controller with one ``Operation`` at a time and must keep
two promises: ``drive`` is idempotent for an operation id (calling it again after a crash
never starts a second reset or a second replacement), and ``progress`` reads what the
backend itself recorded, so a restarted controller finds an operation where it left it.

This package's ``__init__`` imports nothing: a module imports the part it uses (the action
table, ``providers/actions.py``; the registry, ``providers/registry.py``, which ``deploy/``
derives the CRD schema, the parser and the roles from). No provider module imports ``deploy/``.
"""
