"""The frameworks tier's harness (its tests `from harness import *`, which
brings its fixtures): the Mooncake connector code of SGLang (and, as they
land, LMCache and vLLM), unmodified, against mooncake-rs through
`mooncake_rs.compat.install()` (or, with
`MOONCAKE_FRAMEWORKS_BACKEND=upstream`, against upstream's wheel and master,
the same tests). It runs in a venv of its own, with torch
and the pinned frameworks (`venv.sh`), and only when asked:

    venv=$(python/tests/frameworks/venv.sh target/python-wheels/mooncake_rs-*.whl)
    MOONCAKE_FRAMEWORKS=1 MOONCAKE_BIN=target/release/mooncake "$venv/bin/pytest" -q python/tests/frameworks

The cluster is the parent conftest's (3 masters on loopback). Each
framework's connector makes its own store (it contributes a segment, as in
a real deployment); the /dev/shm files those leave are removed when the
session ends. Each framework's file runs in a pytest process of its own, as
each framework runs in its own process in production (`.ci/run`). What a framework needs that this machine lacks is named where it is
stood in for (docs/PYTHON.md, "Tested with").
"""

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest

# The backend under test: mooncake-rs (standing in for the `mooncake`
# package), or upstream's wheel (installed in the same venv), to show the
# tier tests the frameworks' use of Mooncake, not our quirks.
UPSTREAM = os.environ.get("MOONCAKE_FRAMEWORKS_BACKEND", "mooncake-rs") == "upstream"
if not UPSTREAM:
    # Before any framework imports `mooncake.store`.
    import mooncake_rs.compat

    mooncake_rs.compat.install()

from conftest import START_TIMEOUT_S, STOP_GRACE_S, Cluster, free_port, wait_for  # noqa: E402  (the parent conftest)

needs_failover = pytest.mark.skipif(
    UPSTREAM, reason="upstream's master fails over only with its etcd-based HA; the leader-kill cases are ours"
)

MiB = 1 << 20
SHM = Path("/dev/shm")


def shm_files():
    return set(SHM.glob("mooncake-*"))


class UpstreamMaster:
    """Upstream's `mooncake_master` (from its wheel in this venv) with its
    HTTP metadata server: what the frameworks' configs name as master and
    metadata server when the backend is upstream."""

    def __init__(self):
        binary = Path(sys.prefix) / "bin" / "mooncake_master"
        self.dir = Path(tempfile.mkdtemp(prefix="upstream-master-"))
        rpc, http, self.metrics_port = free_port(), free_port(), free_port()
        log = open(self.dir / "master.log", "wb")
        self.proc = subprocess.Popen(
            [str(binary), f"--rpc_port={rpc}", "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
             f"--http_metadata_server_port={http}", "--http_metadata_server_host=127.0.0.1",
             f"--metrics_port={self.metrics_port}", "--metrics_host=127.0.0.1"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )
        log.close()
        self.masters = f"127.0.0.1:{rpc}"
        self.metadata_server = f"http://127.0.0.1:{http}/metadata"
        wait_for("upstream's master to listen", START_TIMEOUT_S,
                 lambda: all(listening(p) for p in (rpc, http, self.metrics_port)), interval_s=0.1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_GRACE_S)
        shutil.rmtree(self.dir, ignore_errors=True)


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def standalone_node(cluster, store_node_of_ours):
    """The address a framework's standalone mode names (`client_server_address`):
    our `mooncake store --http`, or upstream's `mooncake_client` real client."""
    if not UPSTREAM:
        yield store_node_of_ours[0]
        return
    port = free_port()
    log = open(cluster.dir / "real-client.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.prefix) / "bin" / "mooncake_client"), "--host=127.0.0.1", f"--port={port}",
         "--global_segment_size=256MB", f"--master_server_address={cluster.masters}",
         f"--metadata_server={cluster.metadata_server}", "--protocol=tcp"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        wait_for("upstream's real client to listen", START_TIMEOUT_S, lambda: listening(port), interval_s=0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=STOP_GRACE_S * 2)


@pytest.fixture
def store_node_of_ours(request):
    """The parent conftest's `store_node`, only for our backend."""
    return None if UPSTREAM else request.getfixturevalue("store_node")


@pytest.fixture(scope="session")
def cluster():
    """The cluster the frameworks are configured with: 3 masters of ours
    (`metadata_server` P2PHANDSHAKE), or upstream's master."""
    c = UpstreamMaster() if UPSTREAM else Cluster()
    if not UPSTREAM:
        c.metadata_server = "P2PHANDSHAKE"
    yield c
    c.stop()


@pytest.fixture(scope="session", autouse=True)
def remove_new_shm_files():
    """Connector-made stores are not closed by the frameworks' tests and
    other tests' puts may land on their segments: their /dev/shm files are
    removed when the session ends."""
    before = shm_files()
    yield
    for path in shm_files() - before:
        path.unlink(missing_ok=True)


@pytest.fixture
def fresh_cluster():
    """A cluster of this test alone (for tests that kill its masters)."""
    c = Cluster()
    yield c
    c.stop()


# The frameworks' KV-transfer loggers: a WARNING there is a load or a save
# that failed and was papered over (vLLM's store worker logs a failed
# `batch_get_into_multi_buffers` at WARNING and recomputes the blocks: the
# output is the same, so only the log says the store failed).
KV_TRANSFER_LOGGERS = ("vllm.distributed.kv_transfer", "sglang.srt.mem_cache", "lmcache")


class ErrorLogs(logging.Handler):
    """Records what a framework logged at ERROR or above, and at WARNING or
    above from its KV-transfer loggers."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records = []

    def emit(self, record):
        if record.levelno >= logging.ERROR or record.name.startswith(KV_TRANSFER_LOGGERS):
            self.records.append(f"{record.levelname} {record.name}: {self.format(record)}")


@pytest.fixture
def framework_errors():
    """The ERROR lines the frameworks log during the test, and the WARNING
    lines of their KV-transfer loggers: an error that reached the framework
    shows here even where its API returns a bool or it recomputes."""
    handler = ErrorLogs()
    # The root logger, and the frameworks' own (they do not all propagate).
    loggers = [logging.getLogger(name) for name in ("", "sglang", "lmcache", "vllm")]
    for log in loggers:
        log.addHandler(handler)
    yield handler.records
    for log in loggers:
        log.removeHandler(handler)


def stores_in_process():
    """The `MooncakeDistributedStore`s the frameworks' transfer threads in
    this process hold (vLLM's load and save threads do, as `store`)."""
    from mooncake.store import MooncakeDistributedStore

    found = {}
    for t in threading.enumerate():
        store = getattr(t, "store", None)
        if issubclass(type(store), MooncakeDistributedStore):
            found[id(store)] = store
    return list(found.values())


def objects_read(cluster) -> int:
    """How many objects this process's stores read (ours: the clients'
    counter of reads whose bytes landed and matched their checksum;
    upstream: its master's replica-list lookups that found the key, the
    nearest counter it offers, counted across the cluster)."""
    if UPSTREAM:
        m = upstream_metrics(cluster)
        return int(
            m["master_get_replica_list_requests_total"] - m["master_get_replica_list_failures_total"]
            + m["master_batch_get_replica_list_items_total"] - m["master_batch_get_replica_list_failed_items_total"]
        )
    return sum(s._client_stats().get("objects_read", 0) for s in stores_in_process())


def upstream_metrics(cluster) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line.split()[0]:
            name, value = line.split()[:2]
            out[name] = float(value)
    return out


def stored_keys(cluster) -> list:
    """The keys the cluster holds (ours: `mooncake ls`; upstream: its
    master's /get_all_keys)."""
    if UPSTREAM:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/get_all_keys", timeout=10) as r:
            return [k for k in r.read().decode().split() if k]
    out = subprocess.run(
        [cluster.bin, "ls", "--json", f"--masters={cluster.masters}"], capture_output=True, timeout=30, check=True
    )
    return [o["key"] for o in json.loads(out.stdout)]


def stored_count(cluster) -> int:
    """How many objects the cluster holds (ours: `mooncake ls`; upstream:
    its master's `master_key_count`)."""
    if UPSTREAM:
        return int(upstream_metrics(cluster)["master_key_count"])
    out = subprocess.run(
        [cluster.bin, "ls", "--json", f"--masters={cluster.masters}"], capture_output=True, timeout=30, check=True
    )
    return len(json.loads(out.stdout))


def write_json(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


__all__ = [
    "MiB", "UPSTREAM", "cluster", "framework_errors", "free_port", "fresh_cluster", "listening", "needs_failover",
    "objects_read",
    "remove_new_shm_files", "standalone_node", "store_node_of_ours", "stored_count", "stored_keys",
    "stores_in_process", "wait_for", "write_json",
]
