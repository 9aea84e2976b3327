"""Every object call with Mooncake's return values: put (first writer wins),
get (b"" when missing), upsert, put_parts, get_buffer, existence, size,
removal (with KV leases), regex removal, replica descriptors, pins."""

import ctypes
import time

import pytest

from conftest import wait_for
from mooncake_rs.store import (
    ERROR_CODES,
    BufferHandle,
    MooncakeDistributedStore,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
)

OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706
INVALID_PARAMS = -600
ILLEGAL_CLIENT = -601
LEASE_S = 0.5  # the cluster's --default_kv_lease_ttl


def unleased(store, key):
    """Removes `key` once no read's KV lease holds it."""
    wait_for(f"{key}'s KV lease to end", 5, lambda: store.remove(key) == 0, interval_s=0.1)


def test_put_get_and_the_first_writer_wins(store, client):
    # Why: Mooncake's put of an existing key answers 0 and keeps the object.
    assert client.put("t20/a", b"first") == 0
    assert client.put("t20/a", b"second") == 0
    assert client.get("t20/a") == b"first"
    assert store.get("t20/a") == b"first"
    assert client.get("t20/missing") == b""
    assert client.put("t20/bytearray", bytearray(b"ba")) == 0 and client.get("t20/bytearray") == b"ba"
    assert client.put("t20/view", memoryview(b"0123456789")[2:5]) == 0 and client.get("t20/view") == b"234"


def test_upsert_replaces_and_put_parts_joins(client):
    assert client.upsert("t20/u", b"one") == 0 and client.get("t20/u") == b"one"
    assert client.upsert("t20/u", b"two!") == 0 and client.get("t20/u") == b"two!"
    assert client.put_parts("t20/parts", b"Hello, ", bytearray(b"World"), memoryview(b"!")) == 0
    assert client.get("t20/parts") == b"Hello, World!"
    assert client.put_parts("t20/none") == 0 and client.is_exist("t20/none") == 0  # nothing to store
    cfg = ReplicateConfig()
    assert client.put_parts("t20/parts-cfg", b"a", b"b", config=cfg) == 0
    assert client.put_parts("t20/parts", b"kept") == 0 and client.get("t20/parts") == b"Hello, World!"
    assert client.upsert_parts("t20/parts", b"new ", b"bytes") == 0 and client.get("t20/parts") == b"new bytes"


def test_existence_size_and_batches(client):
    big = bytes(range(256)) * 4096  # 1 MiB
    assert client.put_batch(["t20/b1", "t20/b2", "t20/big"], [b"1", b"22", big]) == 0
    assert client.put_batch(["t20/b1", "t20/b3"], [b"x", b"333"]) == 0  # b1 kept
    assert client.get_batch(["t20/b1", "t20/missing", "t20/b3", "t20/big"]) == [b"1", b"", b"333", big]
    assert client.get_batch([]) == []
    assert client.is_exist("t20/b2") == 1 and client.is_exist("t20/missing") == 0
    assert client.batch_is_exist(["t20/b1", "t20/missing", "t20/big"]) == [1, 0, 1]
    assert client.get_size("t20/big") == len(big) and client.get_size("t20/missing") == OBJECT_NOT_FOUND


def test_get_buffer_exposes_the_object_without_a_copy(client):
    # Why: BufferHandle is a view of the store's memory (the local buffer).
    payload = b"buffer protocol" * 1000
    assert client.put("t20/buf", payload) == 0
    h = client.get_buffer("t20/buf")
    assert isinstance(h, BufferHandle) and len(h) == h.size() == len(payload)
    view = memoryview(h)
    assert bytes(view) == payload and not view.readonly and view.format == "b"
    assert ctypes.string_at(h.ptr(), 5) == payload[:5], "ptr() is the view's memory"
    # The handle's memory is the store's own, so get_into may target it.
    assert client.put("t20/small", b"tiny") == 0
    assert client.get_into("t20/small", h.ptr(), 4) == 4 and bytes(view[:4]) == b"tiny"
    del view, h
    assert client.get_buffer("t20/missing") is None
    handles = client.batch_get_buffer(["t20/buf", "t20/missing"])
    assert bytes(memoryview(handles[0])) == payload and handles[1] is None


def test_remove_respects_kv_leases_and_remove_all_counts(client, stores):
    assert client.put("t20/r", b"x") == 0
    assert client.get("t20/r") == b"x"
    assert client.remove("t20/r") == OBJECT_HAS_LEASE  # a reader may still hold it
    # Forced removals ignore leases and pins: only the admin may force.
    assert client.remove("t20/r", True) == ILLEGAL_CLIENT
    assert client.batch_remove(["t20/r"], force=True) == [ILLEGAL_CLIENT]
    assert client.is_exist("t20/r") == 1, "a refused forced remove removed nothing"
    admin = stores.open_admin()
    assert admin.remove("t20/r", True) == 0
    assert client.remove("t20/r") == OBJECT_NOT_FOUND
    assert admin.batch_remove(["t20/missing"], force=True) == [OBJECT_NOT_FOUND]
    for i in range(3):
        assert client.put(f"t20/all/{i}", b"x") == 0
    assert client.remove_all(force=True) == ILLEGAL_CLIENT
    assert client.is_exist("t20/all/0") == 1, "a refused RemoveAll removed nothing"
    assert admin.remove_all(force=True) >= 3
    assert client.is_exist("t20/all/0") == 0


def test_remove_by_regex_matches_with_search(client):
    for key in ["t20/rx/a1", "t20/rx/a2", "t20/rx/b1", "x/t20/rx/a3"]:
        assert client.put(key, b"x") == 0
    assert client.remove_by_regex("^t20/rx/a[0-9]$") == 2
    assert client.batch_is_exist(["t20/rx/a1", "t20/rx/a2", "t20/rx/b1", "x/t20/rx/a3"]) == [0, 0, 1, 1]
    time.sleep(LEASE_S + 0.2)  # existence checks lease what they find, too
    assert client.remove_by_regex("rx/a") == 1  # search, not a full match
    assert client.remove_by_regex("([") == INVALID_PARAMS
    assert client.get("t20/rx/b1") == b"x"
    assert client.remove_by_regex("t20/rx/b") == 0  # leased by the get
    time.sleep(LEASE_S + 0.2)
    assert client.remove_by_regex("t20/rx/b") == 1


def test_replica_descriptors_and_pins(store, client):
    cfg = ReplicateConfig()
    assert (cfg.replica_num, cfg.with_hard_pin, cfg.soft_pin_action) == (1, False, SoftPinAction.PRESERVE)
    cfg.with_hard_pin = True
    cfg.preferred_segment = store.get_hostname()
    assert client.put("t20/pinned", b"pinned", cfg) == 0
    descs = client.batch_get_replica_desc(["t20/pinned", "t20/missing"])
    assert list(descs) == ["t20/pinned"]
    (replica,) = descs["t20/pinned"]
    assert replica.status == ReplicaStatus.COMPLETE and replica.is_memory_replica()
    d = replica.get_memory_descriptor().buffer_descriptor
    assert d.size == 6 and d.transport_endpoint == store.get_hostname()
    assert client.get_replica_desc("t20/missing") == []

    soft = ReplicateConfig()
    soft.soft_pin_action = SoftPinAction.ENABLE
    soft.soft_pin_ttl_ms = 60_000  # the pin lapses a minute after the put
    assert soft.with_soft_pin and client.put("t20/soft", b"s", config=soft) == 0
    soft.with_soft_pin = False
    assert soft.soft_pin_action == SoftPinAction.DISABLE and int(SoftPinAction.ENABLE) == 1
    # Upstream's rules for the TTL: a uint64 (else TypeError), with ENABLE
    # only, a day at most; a refused put changes nothing.
    for bad in (-1, 2**64, "1"):
        with pytest.raises(TypeError):
            soft.soft_pin_ttl_ms = bad
    assert soft.soft_pin_ttl_ms == 60_000
    soft.soft_pin_ttl_ms = None
    assert soft.soft_pin_ttl_ms is None
    preserve = ReplicateConfig()
    preserve.soft_pin_ttl_ms = 1000
    assert client.put("t20/ttl-preserve", b"p", preserve) == INVALID_PARAMS
    assert client.upsert("t20/ttl-preserve", b"p", preserve) == INVALID_PARAMS
    assert client.is_exist("t20/ttl-preserve") == 0
    day_and_more = ReplicateConfig()
    day_and_more.soft_pin_action = SoftPinAction.ENABLE
    day_and_more.soft_pin_ttl_ms = 86_400_001
    assert client.put("t20/ttl-long", b"l", day_and_more) == INVALID_PARAMS
    day_and_more.soft_pin_ttl_ms = 86_400_000
    assert client.put("t20/ttl-long", b"l", day_and_more) == 0
    zero = ReplicateConfig()
    zero.replica_num = 0
    assert client.put("t20/zero", b"z", zero) == INVALID_PARAMS
    assert ERROR_CODES["OBJECT_NOT_FOUND"] == OBJECT_NOT_FOUND


def test_a_store_that_closes_takes_its_objects_with_it(stores):
    # Why: close unmounts the segment; the masters drop what lived only there.
    a = stores.open()
    reader = stores.open(segment=0)
    assert a.put("t20/gone", b"x") == 0
    assert reader.get("t20/gone") == b"x"
    a.close()
    wait_for("the object to leave with its segment", 10, lambda: reader.is_exist("t20/gone") == 0)
    assert reader.get("t20/gone") == b""
    assert isinstance(a, MooncakeDistributedStore)


def test_client_stats_count_the_reads_whose_bytes_landed(client):
    # Why: a framework that falls back silently (recomputes on a failed
    # load) looks the same as one that loaded; its tests read these counters.
    before = client._client_stats()
    assert client.put("t20/stats", b"x" * 1000) == 0
    assert client.get("t20/stats") == b"x" * 1000
    buf = ctypes.create_string_buffer(1000)
    assert client.register_buffer(ctypes.addressof(buf), 1000) == 0
    assert client.get_into("t20/stats", ctypes.addressof(buf), 1000) == 1000
    assert client.unregister_buffer(ctypes.addressof(buf)) == 0
    assert client.get("t20/stats-missing") == b""
    after = client._client_stats()
    grew = {k: after[k] - before[k] for k in after}
    assert grew["objects_read"] == 2 and grew["bytes_read"] == 2000
    assert grew["gets_found"] == 2 and grew["gets_not_found"] == 1 and grew["reads_failed"] == 0
    assert MooncakeDistributedStore()._client_stats() == {}
