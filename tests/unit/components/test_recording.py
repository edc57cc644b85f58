"""The mock-engine harness itself."""

import asyncio

from components import Crds, CrdsArgs
from components._recording import record


def test_record_works_after_an_asyncio_run_in_the_same_process():
    """asyncio.run (an aiohttp test) leaves no current event loop; Pulumi's mocks need one.
    Before the harness set one, the component tests failed when a webhook test ran first."""
    async def nothing() -> None:
        return None

    asyncio.run(nothing())
    mocks = record(lambda: Crds("crds", CrdsArgs()))
    assert len([o for o in mocks.kubernetes_objects() if o["kind"] == "CustomResourceDefinition"]) == 2
