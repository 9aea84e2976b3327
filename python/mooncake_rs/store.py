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
    ExistOptions,
    KVEventWatch,
    MemoryDescriptor,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    QueryTaskResponse,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    TaskStatus,
    TaskType,
    WatchCompactedError,
)

# Upstream 0.3.14 also puts the task enums' members at module level
# (pybind11's export_values). We do the same for those names only: they are
# TaskStatus's and TaskType's, as upstream's final namespace has them
# (upstream's PROCESSING and FAILED there are TaskStatus's too, shadowing
# ReplicaStatus's). We never exported ReplicaStatus's members at module
# level, so no existing caller loses a name; use ReplicaStatus.PROCESSING
# for a replica's state (docs/PYTHON.md).
PENDING = TaskStatus.PENDING
PROCESSING = TaskStatus.PROCESSING
FAILED = TaskStatus.FAILED
SUCCESS = TaskStatus.SUCCESS
REPLICA_COPY = TaskType.REPLICA_COPY
REPLICA_MOVE = TaskType.REPLICA_MOVE

__all__ = [
    "ERROR_CODES",
    "BufferHandle",
    "Descriptor",
    "ExistOptions",
    "KVEventWatch",
    "MemoryDescriptor",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "QueryTaskResponse",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "ReplicateConfig",
    "SoftPinAction",
    "TaskStatus",
    "TaskType",
    "WatchCompactedError",
    "PENDING",
    "PROCESSING",
    "FAILED",
    "SUCCESS",
    "REPLICA_COPY",
    "REPLICA_MOVE",
]
