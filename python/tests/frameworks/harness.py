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


class UpstreamHACluster:
    """Upstream's masters in their HA mode: an etcd on loopback and two
    `mooncake_master --enable_ha --enable_oplog` (one leads, one stands by),
    addressed as `etcd://` as upstream's clients address them; the
    metadata server P2PHANDSHAKE (a master's HTTP one would die with it).
    The failover yardstick of the leader-kill cases.

    Upstream facts it works around, measured (docs/PYTHON.md): a standby
    binds its RPC port only when promoted, so the masters' ports are taken
    below the ephemeral range (a port another connection took by then makes
    the promoted master exit); its oplog reaches the standby asynchronously,
    so `kill` first waits until the standby applied the leader's last
    sequence id (a put acknowledged just before a kill is otherwise lost)."""

    MASTERS = 2

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="upstream-ha-"))
        etcd_client, etcd_peer = free_port(), free_port()
        self.procs, self.logs = [], []
        self.etcd = self._spawn(
            "etcd", ["etcd", "--data-dir", str(self.dir / "etcd"), "--listen-client-urls",
                     f"http://127.0.0.1:{etcd_client}", "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
                     "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}"])
        wait_for("etcd to listen", START_TIMEOUT_S, lambda: listening(etcd_client), interval_s=0.1)
        self.masters = f"etcd://127.0.0.1:{etcd_client}"
        self.metadata_server = "P2PHANDSHAKE"
        self.metrics_ports = []
        binary = Path(sys.prefix) / "bin" / "mooncake_master"
        for i in range(self.MASTERS):
            rpc, metrics = low_free_port(), free_port()
            self.metrics_ports.append(metrics)
            self.procs.append(self._spawn(f"master-{i + 1}", [
                str(binary), "--enable_ha=true", "--enable_oplog=true", f"--etcd_endpoints=127.0.0.1:{etcd_client}",
                "--rpc_address=127.0.0.1", f"--rpc_port={rpc}", "--metrics_host=127.0.0.1",
                f"--metrics_port={metrics}"]))
        self.wait_for_leader()

    def _spawn(self, name, argv):
        log = open(self.dir / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        return proc

    def health(self, i):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_ports[i]}/health", timeout=2) as r:
                return json.loads(r.read().decode())
        except (OSError, ValueError):
            return {}

    def leader(self):
        """The index of the master serving as leader (its warm-up done), or None."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is None and self.health(i).get("service_ready") is True:
                return i
        return None

    def wait_for_leader(self):
        wait_for("an upstream master to lead and serve", 60, lambda: self.leader() is not None, interval_s=0.2)
        return self.leader()

    @property
    def metrics_port(self):
        return self.metrics_ports[self.wait_for_leader()]

    def kill(self, i):
        def standby_caught_up():
            last = upstream_metrics_at(self.metrics_ports[i]).get("ha_oplog_last_sequence_id", 0)
            return all(upstream_metrics_at(self.metrics_ports[j]).get("ha_oplog_applied_sequence_id", 0) >= last
                       for j, p in enumerate(self.procs) if j != i and p.poll() is None)

        wait_for("upstream's standby to apply the leader's oplog", 30, standby_caught_up, interval_s=0.1)
        mounted = upstream_metrics_at(self.metrics_ports[i]).get("master_total_capacity_bytes", 0)
        self.procs[i].kill()
        self.procs[i].wait(timeout=STOP_GRACE_S)
        standby = [p for j, p in enumerate(self.procs) if j != i]
        # The promoted master binds its port now; one that cannot, exits.
        wait_for("upstream's standby to take over", 60,
                 lambda: self.leader() is not None or any(p.poll() is not None for p in standby), interval_s=0.2)
        assert all(p.poll() is None for p in standby), f"upstream's promoted master exited; see {self.dir}"

        # Upstream's clients find the new leader on their own, and a put
        # fails until their segments are mounted with it again: the
        # failover is over when the new leader has every segment back.
        def remounted():
            leader = self.leader()
            return leader is not None and upstream_metrics_at(self.metrics_ports[leader]).get(
                "master_total_capacity_bytes", 0) >= mounted

        wait_for("upstream's clients to remount their segments with the new leader", 60, remounted, interval_s=0.1)

    def stop(self):
        for proc in [*self.procs, self.etcd]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_GRACE_S)
        shutil.rmtree(self.dir, ignore_errors=True)


def low_free_port():
    """A free loopback port below the ephemeral range (32768 and up), which
    outgoing connections cannot take before a standby master binds it."""
    import random

    for _ in range(1000):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port below 32000")


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
    (`metadata_server` P2PHANDSHAKE), or upstream's master (its HA masters
    are `fresh_cluster`'s: a store's setup against them takes seconds,
    which SGLang's own test, making dozens, cannot afford)."""
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
    """A cluster of this test alone (for tests that kill its masters):
    against upstream, its HA masters (upstream's client connects a process
    to one etcd only, "Etcd client already connected": one such cluster a
    framework's file)."""
    c = UpstreamHACluster() if UPSTREAM else Cluster()
    if not UPSTREAM:
        c.metadata_server = "P2PHANDSHAKE"
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
    return upstream_metrics_at(cluster.metrics_port)


def upstream_metrics_at(port) -> dict:
    """An upstream master's Prometheus metrics (unlabelled ones); {} if it
    does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
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
    "MiB", "UPSTREAM", "cluster", "framework_errors", "free_port", "fresh_cluster", "listening", "objects_read",
    "remove_new_shm_files", "standalone_node", "store_node_of_ours", "stored_count", "stored_keys",
    "stores_in_process", "wait_for", "write_json",
]
