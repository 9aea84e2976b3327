"""Upstream 0.3.14's ``mooncake.async_store`` on mooncake-rs.

``MooncakeDistributedStoreAsync`` is a ``MooncakeDistributedStore`` (every
method is there, as is) that also answers ``async_<name>`` for each of its
methods ``<name>``: a coroutine function taking the same arguments that runs
the call on a worker thread (``asyncio.to_thread``, the loop's default
executor) and returns its answer. Every call of ours releases the GIL while
it waits on the network, so calls awaited together run together. A name
without a method behind it raises ``AttributeError``, as upstream's does.
"""

import asyncio
import functools

from mooncake_rs.store import MooncakeDistributedStore

_PREFIX = "async_"


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """The store, with ``async_<method>`` coroutines (see the module)."""

    def __getattr__(self, name: str):
        # Reached only for names the store does not have.
        method_name = name[len(_PREFIX):] if name.startswith(_PREFIX) else ""
        method = getattr(self, method_name, None) if method_name else None
        if method is None or not callable(method):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        @functools.wraps(method)
        async def run(*args, **kwargs):
            return await asyncio.to_thread(method, *args, **kwargs)

        return run


__all__ = ["MooncakeDistributedStoreAsync"]
