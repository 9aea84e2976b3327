"""Mooncake's ``mooncake.store`` API on mooncake-rs.

``MooncakeDistributedStore``, ``ReplicateConfig`` and ``SoftPinAction``
have upstream Mooncake 0.3's method names, arguments, return values and
error codes (negative integers in Mooncake's numbering, see
``ERROR_CODES``). The classes are implemented in Rust (``_native``); every
call releases the GIL while it waits on the network.
"""

from mooncake_rs._native import (
    ERROR_CODES,
    BufferHandle,
    Descriptor,
    KVEventWatch,
    MemoryDescriptor,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    WatchCompactedError,
)

__all__ = [
    "ERROR_CODES",
    "BufferHandle",
    "Descriptor",
    "KVEventWatch",
    "MemoryDescriptor",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "ReplicateConfig",
    "SoftPinAction",
    "WatchCompactedError",
]
