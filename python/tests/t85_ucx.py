"""protocol="ucx": a client reads objects one-sided over UCX from a store node
started with `--ucx`, byte for byte, while its puts go over the checked TCP
lanes; a store node without UCX is read over TCP instead.

Needs a wheel built with the `ucx` feature (`maturin build --features ucx`)
and a `mooncake` binary built with it. Without them the tests skip, unless
MOONCAKE_UCX_REQUIRED=1 (as `.ci/run`'s UCX phase sets), where a skip is a
failure. UCX picks its transports from UCX_TLS (`.ci/run`: tcp)."""

import json
import os
import re
import subprocess
import urllib.request

import pytest
from conftest import free_port, wait_for
from mooncake_rs.store import MooncakeDistributedStore

OBJECTS = 12
SIZE = 256 << 10


def metric(http, name):
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=2) as r:
        text = r.read().decode()
    found = re.search(rf"^{name} (\d+)$", text, re.MULTILINE)
    assert found, f"{name} not in the store node's /metrics"
    return int(found.group(1))


def start_store_node(cluster, *extra):
    http = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [cluster.bin, "store", "--masters", cluster.masters, "--segment-size", "64MiB",
         "--listen", "127.0.0.1:0", "--anonymous", "--http", http, *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )

    def mounted():
        if proc.poll() is not None:
            return "exited"
        try:
            with urllib.request.urlopen(f"http://{http}/standalone", timeout=2) as r:
                return "mounted" if json.loads(r.read())["mounted"] else None
        except OSError:
            return None

    state = wait_for("the store node to mount its segment", 30, mounted)
    if state == "exited":
        err = proc.stderr.read()
        if "ucx" in err.lower() and os.environ.get("MOONCAKE_UCX_REQUIRED") != "1":
            pytest.skip(f"this mooncake binary has no UCX: {err.strip().splitlines()[-1]}")
        raise AssertionError(f"the store node exited: {err}")
    return proc, http


@pytest.fixture
def ucx_client(cluster):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 << 20, "ucx", "", cluster.masters)
    if rc != 0:
        if os.environ.get("MOONCAKE_UCX_REQUIRED") == "1":
            raise AssertionError(f"setup with protocol ucx returned {rc} (is the wheel built with --features ucx?)")
        pytest.skip("this wheel has no UCX (build it with `maturin build --features ucx`)")
    yield s
    s.close()


def stop(proc):
    proc.terminate()
    proc.wait(timeout=10)


def value(i):
    return bytes((i * 31 + j) % 251 for j in range(SIZE))


def round_trip(client, tag):
    for i in range(OBJECTS):
        assert client.put(f"t85/{tag}/{i}", value(i)) == 0
    for _ in range(2):
        for i in range(OBJECTS):
            assert client.get(f"t85/{tag}/{i}") == value(i), f"object {i} read back differs"


def test_gets_read_one_sided_over_ucx_and_puts_stay_on_tcp(cluster, ucx_client):
    proc, http = start_store_node(cluster, "--ucx")
    try:
        round_trip(ucx_client, "ucx")
        assert metric(http, "mooncake_store_written_bytes_total") >= OBJECTS * SIZE, "puts go over TCP"
        assert metric(http, "mooncake_store_read_bytes_total") == 0, "no get went over the TCP lanes"
        assert metric(http, "mooncake_store_ucx_keys_total") >= 1, "the client asked for the segment's key"
    finally:
        stop(proc)


def test_a_store_node_without_ucx_is_read_over_tcp(cluster, ucx_client):
    proc, http = start_store_node(cluster)
    try:
        round_trip(ucx_client, "tcp")
        assert metric(http, "mooncake_store_read_bytes_total") >= 2 * OBJECTS * SIZE, "gets fell back to TCP"
        assert metric(http, "mooncake_store_ucx_keys_total") == 0, "a node without UCX hands out no key"
    finally:
        stop(proc)


def test_a_ucx_node_never_holds_another_tenants_object(cluster, ucx_client):
    # Why: a UCX key reaches the whole segment it was handed out for (issue
    # 38, finding 3). A node serving UCX holds one tenant's objects (the
    # default tenant's here), so no key of it reaches another tenant's bytes:
    # team-b's objects go to the node without UCX, byte for byte.
    ucx, ucx_http = start_store_node(cluster, "--ucx")
    shared, shared_http = start_store_node(cluster)
    b = MooncakeDistributedStore()
    try:
        config = {"local_hostname": "127.0.0.1", "master_server_addr": cluster.masters, "global_segment_size": 0,
                  "local_buffer_size": 16 << 20, "protocol": "tcp", "tenant_id": "team-b"}
        assert b.setup(config) == 0
        for i in range(OBJECTS):
            assert b.put(f"t85/b/{i}", value(i)) == 0
        for i in range(OBJECTS):
            assert b.get(f"t85/b/{i}") == value(i), f"team-b's object {i} read back differs"
        assert metric(ucx_http, "mooncake_store_written_bytes_total") == 0, "team-b's bytes on the UCX node"
        assert metric(shared_http, "mooncake_store_written_bytes_total") >= OBJECTS * SIZE
        # The default tenant still reads over UCX from its node.
        round_trip(ucx_client, "default")
    finally:
        b.close()
        stop(ucx)
        stop(shared)
