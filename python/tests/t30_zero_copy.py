"""The zero-copy calls: registered buffers, put_from / get_into and their
batch, multi-buffer and ranged forms. Bytes move between the socket and the
caller's registered memory; only registered memory is ever touched."""

import ctypes
import os

import pytest

from conftest import Registered

MiB = 1 << 20
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704


@pytest.fixture
def mem(client):
    r = Registered(client, 16 * MiB)
    yield r
    r.close()


def test_register_and_unregister_are_exact(client):
    buf = ctypes.create_string_buffer(4096)
    p = ctypes.addressof(buf)
    assert client.register_buffer(p, 4096) == 0
    assert client.register_buffer(p, 4096) == INVALID_PARAMS  # registered already
    assert client.register_buffer(p + 100, 10) == INVALID_PARAMS  # inside a registered buffer
    assert client.register_buffer(p, 0) == INVALID_PARAMS
    assert client.unregister_buffer(p + 1) == INVALID_PARAMS  # not a registered start
    assert client.unregister_buffer(p) == 0
    assert client.unregister_buffer(p) == INVALID_PARAMS


def test_put_from_and_get_into_move_the_callers_bytes(client, mem):
    for size in (1, 4096, 64 * 1024, 4 * MiB + 3):
        data = os.urandom(size)
        mem.write(0, data)
        assert client.put_from(f"t30/{size}", mem.ptr, size) == 0
        assert client.get_into(f"t30/{size}", mem.ptr + 8 * MiB, 8 * MiB) == size
        assert mem.read(8 * MiB, size) == data
        assert client.get(f"t30/{size}") == data
    assert client.get_into("t30/missing", mem.ptr, 10) == OBJECT_NOT_FOUND
    assert client.get_into("t30/4096", mem.ptr, 4095) == INVALID_PARAMS  # too small: nothing written
    mem.write(0, b"v2")
    assert client.upsert_from("t30/1", mem.ptr, 2) == 0 and client.get("t30/1") == b"v2"


def test_batch_put_from_and_batch_get_into(client, mem):
    keys = [f"t30/batch/{i}" for i in range(32)]
    size = 4096
    payloads = [os.urandom(size) for _ in keys]
    for i, p in enumerate(payloads):
        mem.write(i * size, p)
    ptrs = [mem.ptr + i * size for i in range(len(keys))]
    assert client.batch_put_from(keys, ptrs, [size] * len(keys)) == [0] * len(keys)
    out = [mem.ptr + 4 * MiB + i * size for i in range(len(keys))]
    got = client.batch_get_into(keys + ["t30/batch/missing"], out + [mem.ptr + 8 * MiB], [size] * 33)
    assert got == [size] * 32 + [OBJECT_NOT_FOUND]
    assert [mem.read(4 * MiB + i * size, size) for i in range(32)] == payloads
    assert client.batch_get_into([], [], []) == [] and client.batch_put_from([], [], []) == []


def test_batched_upserts_replace_and_batched_puts_keep(client, mem):
    # Why: SGLang and LMCache write pages again under the same keys with the
    # batched upserts; a batched put keeps what is there (first writer wins).
    keys = [f"t30/upsert/{i}" for i in range(8)]
    assert client.put_batch(keys, [b"old"] * len(keys)) == 0
    assert client.put_batch(keys, [b"kept?"] * len(keys)) == 0
    assert client.get_batch(keys) == [b"old"] * len(keys), "put_batch keeps existing objects"
    assert client.upsert_batch(keys, [b"new-%d" % i for i in range(len(keys))]) == 0
    assert client.get_batch(keys) == [b"new-%d" % i for i in range(len(keys))]
    size = 1000
    payloads = [os.urandom(size) for _ in keys]
    for i, p in enumerate(payloads):
        mem.write(i * size, p)
    ptrs = [mem.ptr + i * size for i in range(len(keys))]
    fresh = "t30/upsert/fresh"
    mem.write(len(keys) * size, b"f" * size)
    codes = client.batch_upsert_from(keys + [fresh], ptrs + [mem.ptr + len(keys) * size], [size] * (len(keys) + 1))
    assert codes == [0] * (len(keys) + 1), "existing keys replaced, a new one stored"
    assert client.get_batch(keys) == payloads and client.get(fresh) == b"f" * size
    # Bad input changes nothing: mismatched lengths, unregistered memory.
    assert client.upsert_batch(keys, [b"x"]) == INVALID_PARAMS
    assert client.batch_upsert_from([keys[0]], [12345], [10]) == [INVALID_PARAMS]
    assert client.get(keys[0]) == payloads[0]


def test_a_store_without_a_local_buffer_puts_only_from_registered_memory(client, stores):
    # Why: upstream's copying put goes through the local buffer, so a store
    # set up with local_buffer_size=0 (a standalone store's setting) refuses
    # it, and its suite checks that; the zero-copy put_from still works.
    s = stores.open(segment=0, buffer=0)
    assert s.put("t30/nobuf", b"x") == INVALID_PARAMS
    assert s.upsert("t30/nobuf", b"x") == INVALID_PARAMS
    assert s.put_batch(["t30/nobuf"], [b"x"]) == INVALID_PARAMS
    assert s.is_exist("t30/nobuf") == 0, "a refused put stores nothing"
    mem = Registered(s, 4096)
    try:
        mem.write(0, b"zero-copy")
        assert s.put_from("t30/nobuf", mem.ptr, 9) == 0
        assert s.get("t30/nobuf") == b"zero-copy"
    finally:
        mem.close()


def test_multi_buffer_puts_gather_and_gets_scatter(client, mem):
    head, tail = os.urandom(1000), os.urandom(5000)
    mem.write(0, head)
    mem.write(MiB, tail)
    rc = client.batch_put_from_multi_buffers(["t30/multi", "t30/multi2"], [[mem.ptr, mem.ptr + MiB], [mem.ptr]], [[1000, 5000], [10]])
    assert rc == [0, 0]
    assert client.get("t30/multi") == head + tail
    # Scatter the 6000 bytes over 3 buffers of 100, 4000 and 2000 bytes.
    dst = [mem.ptr + 2 * MiB, mem.ptr + 3 * MiB, mem.ptr + 4 * MiB]
    got = client.batch_get_into_multi_buffers(["t30/multi", "t30/missing"], [dst, [mem.ptr + 5 * MiB]], [[100, 4000, 2000], [10]])
    assert got == [6000, OBJECT_NOT_FOUND]
    whole = head + tail
    assert mem.read(2 * MiB, 100) + mem.read(3 * MiB, 4000) + mem.read(4 * MiB, 1900) == whole
    short = client.batch_get_into_multi_buffers(["t30/multi"], [[mem.ptr + 2 * MiB]], [[5999]])
    assert short == [INVALID_PARAMS]


def test_get_into_ranges_reads_fragments_buffer_major(client, mem):
    # Why: the partial-read API (headers, slices of tensors) without reading whole objects.
    assert client.put("t30/key1", bytes(range(40))) == 0
    assert client.put("t30/key2", bytes(range(100, 140))) == 0
    b0, b1 = mem.ptr + 6 * MiB, mem.ptr + 7 * MiB
    results = client.get_into_ranges(
        [b0, b1],
        [["t30/key1", "t30/key2"], ["t30/key2", "t30/key1", "t30/missing"]],
        [[[0, 20], [8]], [[4], [16], [0]]],
        [[[1, 30], [2]], [[0], [10], [0]]],
        [[[4, 3], [5]], [[6], [4], [1]]],
    )
    assert results == [[[4, 3], [5]], [[6], [4], [OBJECT_NOT_FOUND]]]
    assert mem.read(6 * MiB, 4) == bytes([1, 2, 3, 4]) and mem.read(6 * MiB + 20, 3) == bytes([30, 31, 32])
    assert mem.read(6 * MiB + 8, 5) == bytes(range(102, 107))
    assert mem.read(7 * MiB + 4, 6) == bytes(range(100, 106)) and mem.read(7 * MiB + 16, 4) == bytes(range(10, 14))
    # A range past the object's end, and a shape that does not match, are refused alone.
    bad = client.get_into_ranges([b0], [["t30/key1", "t30/key2"]], [[[0], [0]]], [[[38], [0, 1]]], [[[5], [1]]])
    assert bad == [[[INVALID_PARAMS], [INVALID_PARAMS]]]


def test_get_into_ranges_answers_as_upstream_0_3_14(client, mem):
    """Each answer as upstream 0.3.14's wheel gave it against its own master
    (measured 2026-12-06): a size-0 range reads 0 bytes; a range past the
    destination buffer's registered end, an unregistered or null buffer, a
    key count that differs from the destination groups, and top-level
    lists of different lengths are INVALID_PARAMS, shaped like the
    destination offsets; `[]` answers `[]`."""
    assert client.put("t30/r14", bytes(range(64))) == 0
    b0 = mem.ptr + 8 * MiB
    assert client.get_into_ranges([b0], [["t30/r14"]], [[[0]]], [[[0]]], [[[0]]]) == [[[0]]]
    assert client.get_into_ranges([b0], [["t30/r14"]], [[[0]]], [[[0]]], [[[64]]]) == [[[64]]]
    end = mem.ptr + 16 * MiB - 10
    assert client.get_into_ranges([end], [["t30/r14"]], [[[0]]], [[[0]]], [[[20]]]) == [[[INVALID_PARAMS]]]
    stray = ctypes.create_string_buffer(64)
    assert client.get_into_ranges([ctypes.addressof(stray)], [["t30/r14"]], [[[0]]], [[[0]]], [[[8]]]) == [
        [[INVALID_PARAMS]]]
    assert client.get_into_ranges([0], [["t30/r14"]], [[[0]]], [[[0]]], [[[8]]]) == [[[INVALID_PARAMS]]]
    two_keys_one_group = client.get_into_ranges([b0], [["t30/r14", "t30/r14"]], [[[0]]], [[[0]]], [[[8]]])
    assert all(code == INVALID_PARAMS for group in two_keys_one_group[0] for code in group), two_keys_one_group
    assert client.get_into_ranges([b0, b0], [["t30/r14"]], [[[0]]], [[[0]]], [[[8]]]) == [[[INVALID_PARAMS]]]
    assert client.get_into_ranges([], [], [], [], []) == []


def test_unregistered_memory_is_never_touched(client, mem):
    # Why: a wrong address must be an error code, not a crash or a stray write.
    stray = ctypes.create_string_buffer(4096)
    p = ctypes.addressof(stray)
    assert client.put("t30/stray", b"s" * 100) == 0
    assert client.get_into("t30/stray", p, 4096) == INVALID_PARAMS
    assert client.put_from("t30/stray2", p, 100) == INVALID_PARAMS
    assert client.get_into("t30/stray", 8, 100) == INVALID_PARAMS
    assert client.get_into("t30/stray", mem.ptr + 16 * MiB - 50, 100) == INVALID_PARAMS  # runs past the end
    assert client.batch_get_into(["t30/stray", "t30/stray"], [p, mem.ptr], [100, 100]) == [INVALID_PARAMS, 100]
    assert client.batch_put_from(["t30/s1"], [p], [10]) == [INVALID_PARAMS]
    # Destinations of one call that overlap are refused (each is written alone).
    assert client.batch_get_into(["t30/stray", "t30/stray"], [mem.ptr, mem.ptr + 50], [100, 100]) == [INVALID_PARAMS] * 2
    assert stray.raw == b"\0" * 4096
