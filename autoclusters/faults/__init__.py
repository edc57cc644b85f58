"""The fault taxonomy: which fault codes exist, how bad they are, and what repairs them.

The catalog is data (``catalog.yaml``), loaded into frozen dataclasses with a strict
schema. The detector uses it to name faults and pick condition reasons; the controller
uses it to choose reset or replace for a fault read back from a node condition.
"""

from autoclusters.api import CatalogAction, FaultClass
from autoclusters.faults.catalog import (
    Catalog,
    CatalogError,
    FaultEntry,
    FaultRef,
    Severity,
    load_catalog,
)

__all__ = [
    "Catalog",
    "CatalogAction",
    "CatalogError",
    "FaultClass",
    "FaultEntry",
    "FaultRef",
    "Severity",
    "load_catalog",
]
