"""Standalone mode (SGLang's `standalone_storage`): the inference process
allocates its buffers with `MooncakeHostMemAllocator` and calls
`setup_dummy(…, server_address)` with the HTTP address of a store node on
the same host (`mooncake store --http`). The store node holds the cache, so
an inference process that restarts finds its objects again. Also
`init_all`, upstream's all-defaults setup."""

import ctypes
import os

import pytest

from conftest import free_port
from mooncake_rs.store import MooncakeDistributedStore, MooncakeHostMemAllocator

MiB = 1 << 20
INVALID_PARAMS = -600


def test_a_dummy_store_keeps_its_cache_in_the_store_node_across_restarts(store_node):
    http, info = store_node
    alloc = MooncakeHostMemAllocator()
    ptr = alloc.alloc(MiB)
    data = os.urandom(64 * 1024)
    ctypes.memmove(ptr, data, len(data))

    first = MooncakeDistributedStore()
    assert first.setup_dummy(0, 16 * MiB, http) == 0
    assert first.register_buffer(ptr, MiB) == 0
    assert first.put_from("t95/kv", ptr, len(data)) == 0
    # The bytes live in the store node's segment, not in this process.
    (replica,) = first.get_replica_desc("t95/kv")
    assert replica.get_memory_descriptor().buffer_descriptor.transport_endpoint == info["endpoint"]
    assert first.unregister_buffer(ptr) == 0
    assert first.close() == 0

    # The inference process "restarts": a new dummy finds the object.
    second = MooncakeDistributedStore()
    assert second.setup_dummy(0, 16 * MiB, http) == 0
    assert second.get("t95/kv") == data
    assert second.register_buffer(ptr, MiB) == 0
    ctypes.memset(ptr, 0, len(data))
    assert second.get_into("t95/kv", ptr, MiB) == len(data)
    assert ctypes.string_at(ptr, len(data)) == data
    assert second.unregister_buffer(ptr) == 0
    second.close()
    assert alloc.free(ptr) == 0
    assert alloc.free(ptr) == -1


def test_setup_dummy_without_a_store_node_fails_and_leaves_the_store_unset():
    s = MooncakeDistributedStore()
    assert s.setup_dummy(0, 16 * MiB, f"127.0.0.1:{free_port()}") == -1
    assert s.health_check() == 1  # not set up
    with pytest.raises(TypeError):
        s.setup_dummy(-1, 0, "127.0.0.1:1")
    with pytest.raises(TypeError):
        MooncakeHostMemAllocator().alloc(-5)


def test_init_all_sets_up_with_upstreams_defaults(cluster, monkeypatch):
    monkeypatch.setenv("MOONCAKE_MASTER", cluster.masters)
    s = MooncakeDistributedStore()
    try:
        assert s.init_all("tcp", "", 16 * MiB) == 0
        assert s.init_all("tcp", "") == INVALID_PARAMS  # set up already
        assert s.put("t95/init", b"x") == 0
        assert s.get("t95/init") == b"x"
    finally:
        s.close()
