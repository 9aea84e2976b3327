"""Two Python processes contribute segments: objects put by one are read by
the other, replicas spread across both, preferred segments are honored, and
when one closes (or dies) the objects with a replica on the other survive."""

import signal

from conftest import wait_for
from mooncake_rs.store import ReplicateConfig

KEYS = 20


def endpoints(store, key):
    descs = store.batch_get_replica_desc([key]).get(key, [])
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint for d in descs)


def two_replicas():
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    return cfg


def test_objects_cross_processes_and_replicas_spread(store, stores):
    other = stores.helper()
    assert other.hostname != store.get_hostname()
    # Put here, read there; put there, read here.
    assert store.put("t60/here", b"from this process") == 0
    assert other.command("get", key="t60/here")["hex"] == b"from this process".hex()
    assert other.command("put", key="t60/there", hex=b"from the helper".hex())["rc"] == 0
    assert store.get("t60/there") == b"from the helper"
    # Two replicas land on the two segments.
    assert store.put("t60/both", b"twice", two_replicas()) == 0
    assert endpoints(store, "t60/both") == sorted([store.get_hostname(), other.hostname])
    # A preferred segment is used when it has room.
    cfg = ReplicateConfig()
    cfg.preferred_segment = other.hostname
    assert store.put("t60/on-other", b"there", cfg) == 0
    assert endpoints(store, "t60/on-other") == [other.hostname]


def test_one_store_closing_keeps_what_has_a_replica_elsewhere(store, client, stores):
    other = stores.helper()
    for i in range(KEYS):
        assert client.put(f"t60/keep/{i}", f"value {i}".encode(), two_replicas()) == 0
    cfg = ReplicateConfig()
    cfg.preferred_segment = other.hostname
    assert client.put("t60/only-there", b"x", cfg) == 0
    assert other.command("close")["rc"] == 0
    # Closing unmounted the helper's segment: its only-there object is gone,
    # the others keep their replica in this process.
    assert client.is_exist("t60/only-there") == 0
    for i in range(KEYS):
        assert client.get(f"t60/keep/{i}") == f"value {i}".encode()
        assert endpoints(client, f"t60/keep/{i}") == [store.get_hostname()]


def test_a_dead_store_is_skipped_then_expires(store, client, stores):
    # Why: a killed process cannot unmount; reads fall back to the live
    # replica at once, and the masters expire the dead segment (client_ttl 3 s).
    other = stores.helper()
    for i in range(KEYS):
        assert client.put(f"t60/dead/{i}", b"v" * 1000, two_replicas()) == 0
    other.proc.send_signal(signal.SIGKILL)
    other.proc.wait(timeout=10)
    for i in range(KEYS):
        assert client.get(f"t60/dead/{i}") == b"v" * 1000
    wait_for("the dead store's segment to expire", 20,
             lambda: endpoints(client, "t60/dead/0") == [store.get_hostname()], interval_s=0.2)
    assert client.get("t60/dead/1") == b"v" * 1000
