"""Bad input gets Mooncake's error code, or a Python exception where
Mooncake raises one (wrong types, negative numbers), and never crashes the
interpreter: calls before setup and after close, mismatched batches, empty
values, impossible placements, huge sizes."""

import ctypes

import pytest

from mooncake_rs.store import MooncakeDistributedStore, ReplicateConfig

INVALID_PARAMS = -600


def every_call(s, ptr):
    """Each method once, with well-formed arguments; name -> result."""
    return {
        "put": s.put("k", b"x"),
        "upsert": s.upsert("k", b"x"),
        "put_parts": s.put_parts("k", b"x"),
        "put_from": s.put_from("k", ptr, 1),
        "upsert_from": s.upsert_from("k", ptr, 1),
        "get": s.get("k"),
        "get_buffer": s.get_buffer("k"),
        "get_into": s.get_into("k", ptr, 1),
        "get_into_ranges": s.get_into_ranges([ptr], [["k"]], [[[0]]], [[[0]]], [[[1]]]),
        "put_batch": s.put_batch(["k"], [b"x"]),
        "get_batch": s.get_batch(["k"]),
        "batch_get_buffer": s.batch_get_buffer(["k"]),
        "batch_put_from": s.batch_put_from(["k"], [ptr], [1]),
        "batch_get_into": s.batch_get_into(["k"], [ptr], [1]),
        "batch_put_from_multi_buffers": s.batch_put_from_multi_buffers(["k"], [[ptr]], [[1]]),
        "batch_get_into_multi_buffers": s.batch_get_into_multi_buffers(["k"], [[ptr]], [[1]]),
        "is_exist": s.is_exist("k"),
        "batch_is_exist": s.batch_is_exist(["k"]),
        "batch_probe_key": s.batch_probe_key(["k"]),
        "probe_key": s.probe_key("k"),
        "get_size": s.get_size("k"),
        "remove": s.remove("k"),
        "batch_remove": s.batch_remove(["k"]),
        "remove_all": s.remove_all(),
        "remove_by_regex": s.remove_by_regex("k"),
        "register_buffer": s.register_buffer(ptr, 1),
        "unregister_buffer": s.unregister_buffer(ptr),
        "batch_get_replica_desc": s.batch_get_replica_desc(["k"]),
        "get_replica_desc": s.get_replica_desc("k"),
        "health_check": s.health_check(),
        "get_hostname": s.get_hostname(),
        "close": s.close(),
    }


NOT_OPEN = {
    "put": INVALID_PARAMS, "upsert": INVALID_PARAMS, "put_parts": INVALID_PARAMS, "put_from": INVALID_PARAMS,
    "upsert_from": INVALID_PARAMS, "get": b"", "get_buffer": None, "get_into": INVALID_PARAMS,
    "get_into_ranges": [[[INVALID_PARAMS]]], "put_batch": INVALID_PARAMS, "get_batch": [b""],
    "batch_get_buffer": [None], "batch_put_from": [INVALID_PARAMS], "batch_get_into": [INVALID_PARAMS],
    "batch_put_from_multi_buffers": [INVALID_PARAMS], "batch_get_into_multi_buffers": [INVALID_PARAMS],
    "is_exist": -1, "batch_is_exist": [-1], "batch_probe_key": [-1], "probe_key": -1,
    "get_size": INVALID_PARAMS, "remove": INVALID_PARAMS,
    "batch_remove": [INVALID_PARAMS], "remove_all": INVALID_PARAMS, "remove_by_regex": INVALID_PARAMS,
    "register_buffer": INVALID_PARAMS, "unregister_buffer": INVALID_PARAMS, "batch_get_replica_desc": {},
    "get_replica_desc": [], "health_check": 1, "get_hostname": "", "close": 0,
}


def test_every_call_before_setup_and_after_close_is_refused(stores):
    # Why: upstream crashes the interpreter on most of these; we answer.
    buf = ctypes.create_string_buffer(16)
    ptr = ctypes.addressof(buf)
    assert every_call(MooncakeDistributedStore(), ptr) == NOT_OPEN
    s = stores.open()
    s.close()
    assert every_call(s, ptr) == NOT_OPEN


def test_wrong_types_raise_type_error(client):
    for call in [
        lambda: client.put("k", "a str is not bytes"),
        lambda: client.put("k", 5),
        lambda: client.put(5, b"x"),
        lambda: client.put("k", b"x", "not a config"),
        lambda: client.get_into("k", -1, 10),
        lambda: client.get_into("k", 1024, -1),
        lambda: client.put_from("k", 1024, -5),
        lambda: client.register_buffer(1024, -1),
        lambda: client.get_into("k", 1.5, 10),
        lambda: client.batch_get_into(["k"], [-8], [1]),
        lambda: client.batch_put_from(["k"], "not a list", [1]),
        lambda: client.get_batch(None),
        lambda: client.get_batch("a str is not a list of keys"),
        lambda: client.put_parts("k", b"x", "str part"),
    ]:
        with pytest.raises(TypeError):
            call()
    with pytest.raises((TypeError, OverflowError)):
        client.get_into("k", 1 << 80, 10)


def test_malformed_batches_and_values_get_invalid_params(client):
    buf = ctypes.create_string_buffer(1 << 16)
    p = ctypes.addressof(buf)
    assert client.register_buffer(p, 1 << 16) == 0
    assert client.put("t40/empty", b"") == INVALID_PARAMS
    assert client.put_from("t40/empty", p, 0) == INVALID_PARAMS
    assert client.put_batch(["a", "b"], [b"1"]) == INVALID_PARAMS
    assert client.put_batch(["t40/ok", "t40/e"], [b"1", b""]) == INVALID_PARAMS
    assert client.batch_put_from(["a", "b"], [p], [1, 1]) == [INVALID_PARAMS, INVALID_PARAMS]
    assert client.batch_get_into(["a"], [p], [1, 2]) == [INVALID_PARAMS]
    assert client.batch_put_from_multi_buffers(["a", "b"], [[p]], [[1]]) == [INVALID_PARAMS] * 2
    assert client.batch_get_into_multi_buffers(["a"], [[p, p + 10]], [[1]]) == [INVALID_PARAMS]
    assert client.put("", b"x") == INVALID_PARAMS
    huge = ReplicateConfig()
    huge.replica_num = 1 << 40
    assert client.put("t40/huge-replicas", b"x", huge) == INVALID_PARAMS
    assert client.unregister_buffer(p) == 0


def test_an_object_larger_than_any_segment_is_refused(client):
    big = bytes(65 << 20)  # the segments are 64 MiB
    assert client.put("t40/too-big", big) == INVALID_PARAMS
    assert client.is_exist("t40/too-big") == 0
