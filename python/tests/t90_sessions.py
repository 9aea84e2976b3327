"""Put and get sessions with ranged transfers (the calls SGLang's direct
linker and vllm-ascend's layer-wise connector make): a put session reserves
an object, ranged writes fill it layer by layer, the end makes it readable
and a revoke leaves nothing; a get session resolves replicas once and serves
ranged reads under its KV lease. Also put_from_with_metadata."""

import ctypes
import os

import pytest

from conftest import Cluster, Registered, Stores, wait_for

KiB, MiB = 1 << 10, 1 << 20
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800


@pytest.fixture
def mem(client):
    return Registered(client, 8 * MiB)


def layers(key_bytes, n):
    """`key_bytes` cut in `n` equal layers: (offset, bytes) each."""
    step = len(key_bytes) // n
    return [(i * step, key_bytes[i * step:(i + 1) * step]) for i in range(n)]


def write_layer(client, mem, keys, data, n, layer):
    """Writes layer `layer` of `n` of every key's bytes (`data[key]`) into
    its put session, from its own place in `mem`: one ranged call."""
    ptrs, sizes, offsets = [], [], []
    for i, k in enumerate(keys):
        offset, chunk = layers(data[k], n)[layer]
        src = (i * n + layer) * len(chunk)
        mem.write(src, chunk)
        ptrs.append([mem.ptr + src])
        sizes.append([len(chunk)])
        offsets.append([offset])
    return client.batch_put_from_multi_buffer_ranges(keys, ptrs, sizes, offsets)


def test_a_put_session_fills_an_object_layer_by_layer(client, mem):
    keys = ["t90/a", "t90/b"]
    size = 64 * KiB
    data = {k: os.urandom(size) for k in keys}
    assert client.batch_put_session_start(keys, [size, size]) == [0, 0]
    # Reserved, not readable.
    assert client.is_exist(keys[0]) == 0
    # Four layers, written last layer first, one call per layer.
    for layer in reversed(range(4)):
        assert write_layer(client, mem, keys, data, 4, layer) == [16 * KiB, 16 * KiB]
    assert client.batch_put_session_end(keys) == [0, 0]
    for k in keys:
        assert client.get(k) == data[k]
    # The sessions are gone: ending again is refused.
    assert client.batch_put_session_end(keys) == [INVALID_PARAMS, INVALID_PARAMS]


def test_bytes_no_range_wrote_read_back_as_zeros(client, mem):
    key, size = "t90/gaps", 10_000
    head = os.urandom(1000)
    mem.write(0, head)
    assert client.batch_put_session_start([key], [size]) == [0]
    # Two ranges of one call: [0, 1000) and [5000, 6000).
    got = client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr, mem.ptr]], [[1000, 1000]], [[0, 5000]])
    assert got == [2000]
    assert client.batch_put_session_end([key]) == [0]
    # The object passed its checksum on the way back (a get verifies it).
    assert client.get(key) == head + bytes(4000) + head + bytes(4000)


def test_a_revoked_put_session_leaves_nothing(client, mem):
    key = "t90/revoked"
    mem.write(0, b"x" * 4096)
    assert client.batch_put_session_start([key], [4096]) == [0]
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[4096]], [[0]]) == [4096]
    assert client.batch_put_session_revoke([key]) == [0]
    assert client.is_exist(key) == 0
    assert client.get(key) == b""
    assert client.batch_put_session_revoke([key]) == [INVALID_PARAMS]
    # The key is free for a new put.
    assert client.put(key, b"again") == 0
    assert client.get(key) == b"again"


def test_put_session_misuse_is_refused_and_changes_nothing(client, mem):
    key = "t90/misuse"
    assert client.batch_put_session_start([key, "t90/other"], [4096]) == [INVALID_PARAMS, INVALID_PARAMS]
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[10]], [[0]]) == [INVALID_PARAMS]
    assert client.batch_put_session_start([key, key], [4096, 4096]) == [0, OBJECT_ALREADY_EXISTS]
    assert client.batch_put_session_start([key], [4096]) == [INVALID_PARAMS]  # one is open
    # Past the object's end, overlapping, unregistered, mismatched lists.
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[100]], [[4000]]) == [INVALID_PARAMS]
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr, mem.ptr]], [[100, 100]],
                                                     [[0, 50]]) == [INVALID_PARAMS]
    unregistered = ctypes.create_string_buffer(100)
    assert client.batch_put_from_multi_buffer_ranges([key], [[ctypes.addressof(unregistered)]], [[100]],
                                                     [[0]]) == [INVALID_PARAMS]
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[100, 1]], [[0]]) == [INVALID_PARAMS]
    assert client.batch_put_from_multi_buffer_ranges([key, key], [[mem.ptr]], [[1]], [[0]]) == [
        INVALID_PARAMS, INVALID_PARAMS]
    with pytest.raises(TypeError):
        client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[-1]], [[0]])
    # None of that wrote: a range over [0, 4096) is still free.
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[4096]], [[0]]) == [4096]
    # Each byte has one writer.
    assert client.batch_put_from_multi_buffer_ranges([key], [[mem.ptr]], [[1]], [[4095]]) == [INVALID_PARAMS]
    assert client.batch_put_session_end([key]) == [0]
    # A key that exists cannot be reserved again.
    assert client.batch_put_session_start([key], [4096]) == [OBJECT_ALREADY_EXISTS]
    assert client.batch_put_session_start(["t90/zero"], [0]) == [INVALID_PARAMS]


def test_a_get_session_serves_ranged_reads(client, mem):
    keys = ["t90/g1", "t90/g2"]
    data = {k: os.urandom(32 * KiB) for k in keys}
    for k in keys:
        assert client.put(k, data[k]) == 0
    assert client.batch_get_session_start(keys) == [0, 0]
    codes, sources = client.batch_get_session_start_with_sources(keys)
    assert (codes, sources) == ([0, 0], ["memory", "memory"])
    # Per key, two ranges: [1000, 5000) and [20000, 20100), into separate places.
    ptrs = [[mem.ptr + i * MiB, mem.ptr + i * MiB + 8192] for i in range(2)]
    got = client.batch_get_into_multi_buffer_ranges(keys, ptrs, [[4000, 100]] * 2, [[1000, 20000]] * 2)
    assert got == [4100, 4100]
    for i, k in enumerate(keys):
        assert mem.read(i * MiB, 4000) == data[k][1000:5000]
        assert mem.read(i * MiB + 8192, 100) == data[k][20000:20100]
    # Past the end, overlapping destinations, no session: refused.
    assert client.batch_get_into_multi_buffer_ranges([keys[0]], [[mem.ptr]], [[10]], [[32 * KiB - 5]]) == [
        INVALID_PARAMS]
    assert client.batch_get_into_multi_buffer_ranges([keys[0]], [[mem.ptr, mem.ptr + 5]], [[10, 10]],
                                                     [[0, 100]]) == [INVALID_PARAMS]
    assert client.batch_get_session_end(keys) == 0
    assert client.batch_get_into_multi_buffer_ranges([keys[0]], [[mem.ptr]], [[10]], [[0]]) == [INVALID_PARAMS]
    assert client.batch_get_session_start(["t90/none"]) == [OBJECT_NOT_FOUND]
    assert client.batch_get_session_start([]) == []
    client.record_prefetched_tokens(128)


def test_a_get_session_past_its_kv_lease_is_refused(client, mem):
    # The test cluster's KV lease is 0.5 s (conftest MASTER_FLAGS).
    key = "t90/lease"
    assert client.put(key, os.urandom(4096)) == 0
    assert client.batch_get_session_start([key]) == [0]
    read = lambda: client.batch_get_into_multi_buffer_ranges([key], [[mem.ptr]], [[64]], [[0]])[0]
    wait_for("the KV lease to end", 10, lambda: read() == LEASE_EXPIRED)
    # The expired session was dropped: a new one is needed.
    assert read() == INVALID_PARAMS
    assert client.batch_get_session_start([key]) == [0]
    assert read() == 64


def test_put_from_with_metadata_stores_the_metadata_first(client, mem):
    meta, data = os.urandom(100), os.urandom(5000)
    mem.write(0, data)
    mem.write(MiB, meta)
    assert client.put_from_with_metadata("t90/meta", mem.ptr, mem.ptr + MiB, len(data), len(meta)) == 0
    assert client.get("t90/meta") == meta + data
    assert client.put_from_with_metadata("t90/empty", mem.ptr, mem.ptr + MiB, 0, 10) == 0
    assert client.is_exist("t90/empty") == 0


@pytest.fixture(scope="module")
def own_cluster():
    # A cluster of its own: this test kills the leader.
    c = Cluster()
    yield c
    c.stop()


def test_put_sessions_across_a_leader_kill_complete_or_leave_nothing(own_cluster):
    stores = Stores(own_cluster)
    try:
        stores.open()  # the segment
        client = stores.open(segment=0)
        mem = Registered(client, 4 * MiB)
        keys = [f"t90/kill/{i}" for i in range(8)]
        data = {k: os.urandom(64 * KiB) for k in keys}
        assert client.batch_put_session_start(keys, [64 * KiB] * len(keys)) == [0] * len(keys)

        assert write_layer(client, mem, keys, data, 2, 0) == [32 * KiB] * len(keys)
        old = own_cluster.leader()
        own_cluster.kill(old)
        assert own_cluster.wait_for_leader() != old
        # The data path needs no master, but the new leader takes the dead
        # one's arenas back from the store node within a heartbeat (so the
        # bytes freed there can be used again): a layer written after that
        # is refused, one written before lands.
        written = write_layer(client, mem, keys, data, 2, 1)
        assert all(w in (32 * KiB, TRANSFER_FAIL) for w in written), written
        ended = client.batch_put_session_end(keys)
        # The reservations lived on the dead leader: each end either
        # committed (the bytes read back whole) or failed and stored nothing.
        for k, w, rc in zip(keys, written, ended):
            if rc == 0:
                assert w == 32 * KiB, "a session with a refused layer was committed"
                assert client.get(k) == data[k]
            else:
                assert rc in (OBJECT_NOT_FOUND, TRANSFER_FAIL), rc
                assert client.is_exist(k) == 0
        failed = [k for k, rc in zip(keys, ended) if rc != 0]
        # A failed end keeps its session; revoking it succeeds and the key
        # can be put again.
        assert client.batch_put_session_revoke(failed) == [0] * len(failed)
        for k in failed:
            assert client.put(k, data[k]) == 0
            assert client.get(k) == data[k]
    finally:
        stores.close_all()
