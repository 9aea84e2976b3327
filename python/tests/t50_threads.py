"""Many Python threads on one store at once, and the GIL released while a
call waits: other Python code runs during a long transfer."""

import ctypes
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import wait_for

MiB = 1 << 20
THREADS = 8
OPS_PER_THREAD = 40
JOIN_TIMEOUT_S = 120


def test_eight_threads_put_and_get_their_own_keys(client):
    size = 64 * 1024
    buf = ctypes.create_string_buffer(THREADS * 2 * size)
    base = ctypes.addressof(buf)
    assert client.register_buffer(base, THREADS * 2 * size) == 0

    def worker(t):
        src, dst = base + 2 * t * size, base + (2 * t + 1) * size
        errors = []
        for i in range(OPS_PER_THREAD):
            data = os.urandom(size)
            ctypes.memmove(src, data, size)
            key = f"t50/{t}/{i}"
            for name, rc, want in [
                ("put_from", client.put_from(key, src, size), 0),
                ("get_into", client.get_into(key, dst, size), size),
                ("is_exist", client.is_exist(key), 1),
            ]:
                if rc != want:
                    errors.append(f"{name} {key}: {rc}")
            if ctypes.string_at(dst, size) != data:
                errors.append(f"{key}: bytes differ")
            if client.get(key) != data:
                errors.append(f"get {key}: bytes differ")
        batch = [f"t50/{t}/{i}" for i in range(OPS_PER_THREAD)]
        if client.batch_is_exist(batch) != [1] * OPS_PER_THREAD:
            errors.append("batch_is_exist")
        return errors

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(worker, range(THREADS), timeout=JOIN_TIMEOUT_S))
    assert [e for r in results for e in r] == []
    assert client.unregister_buffer(base) == 0


def test_the_gil_is_released_while_a_call_waits(client):
    # Why: a transfer must not stop the interpreter. A 32 MiB get_into takes
    # several ms; with the GIL held, this thread could run only between calls
    # (a tick or two per call), released it runs every ~0.5 ms throughout.
    size, calls = 32 * MiB, 20
    buf = ctypes.create_string_buffer(size)
    p = ctypes.addressof(buf)
    assert client.register_buffer(p, size) == 0
    assert client.put_from("t50/big", p, size) == 0
    done = threading.Event()
    results = []

    def reader():
        for _ in range(calls):
            results.append(client.get_into("t50/big", p, size))
        done.set()

    th = threading.Thread(target=reader)
    ticks = 0
    th.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.0005)
    th.join(timeout=JOIN_TIMEOUT_S)
    assert results == [size] * calls
    assert ticks >= 4 * calls, f"this thread ran {ticks} times during {calls} calls: the GIL is held during I/O"
    assert client.unregister_buffer(p) == 0


def test_stores_are_safe_to_share_across_setup_and_close(stores):
    # Why: calls racing close get a code (or finish), never a crash.
    s = stores.open()
    assert s.put("t50/race", b"x") == 0
    stop = threading.Event()
    seen = set()

    def hammer():
        while not stop.is_set():
            seen.add(s.get("t50/race"))
            seen.add(s.is_exist("t50/race"))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for("the threads to be calling", 10, lambda: b"x" in seen)
    assert s.close() == 0
    stop.set()
    for t in threads:
        t.join(timeout=JOIN_TIMEOUT_S)
    assert seen <= {b"x", b"", 1, 0, -1}, seen
    assert b"" in seen or -1 in seen  # calls after close were refused
