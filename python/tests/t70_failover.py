"""The master leader dies in the middle of a put/get loop: the client
library finds the new leader and retries, so no error reaches Python and
every acknowledged put reads back."""

import ctypes
import os
import threading

import pytest

from conftest import Cluster, Stores, wait_for

SIZE = 16 * 1024
LOOP_TIMEOUT_S = 120
AFTER_FAILOVER_OPS = 50


@pytest.fixture(scope="module")
def own_cluster():
    # A cluster of its own: this test kills and restarts masters.
    c = Cluster()
    yield c
    c.stop()


def test_leader_failover_mid_loop_surfaces_no_error(own_cluster):
    stores = Stores(own_cluster)
    try:
        run_loop_through_failover(own_cluster, stores)
    finally:
        stores.close_all()


def run_loop_through_failover(cluster, stores):
    stores.open()  # the segment
    client = stores.open(segment=0)
    buf = ctypes.create_string_buffer(2 * SIZE)
    base = ctypes.addressof(buf)
    assert client.register_buffer(base, 2 * SIZE) == 0
    errors, acked, stop = [], [], threading.Event()
    ops = [0]

    def loop():
        i = 0
        while not stop.is_set():
            key, data = f"t70/{i}", os.urandom(SIZE)
            ctypes.memmove(base, data, SIZE)
            results = [
                ("put_from", client.put_from(key, base, SIZE), 0),
                ("get_into", client.get_into(key, base + SIZE, SIZE), SIZE),
                ("is_exist", client.is_exist(key), 1),
                ("put", client.put(key + "/b", data[:100]), 0),
            ]
            errors.extend(f"{name} {key}: {rc}" for name, rc, want in results if rc != want)
            if ctypes.string_at(base + SIZE, SIZE) != data:
                errors.append(f"{key}: read other bytes")
            acked.append((key, data))
            i += 1
            ops[0] = i

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        wait_for("the loop to run", 30, lambda: ops[0] >= 20)
        old = cluster.leader()
        assert old is not None
        killed_at = ops[0]
        cluster.kill(old)
        new = cluster.wait_for_leader()
        assert new != old
        wait_for("the loop to go on after the failover", LOOP_TIMEOUT_S,
                 lambda: ops[0] >= killed_at + AFTER_FAILOVER_OPS, interval_s=0.1)
        cluster.start_master(old)  # it rejoins from its data directory
        rejoined_at = ops[0]
        wait_for("the loop to go on while the old leader rejoins", LOOP_TIMEOUT_S,
                 lambda: ops[0] >= rejoined_at + AFTER_FAILOVER_OPS, interval_s=0.1)
    finally:
        stop.set()
        worker.join(timeout=LOOP_TIMEOUT_S)
    assert not worker.is_alive()
    assert errors == []
    for key, data in acked:
        assert client.get(key) == data, key
