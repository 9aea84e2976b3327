"""The cluster harness of the Python tests: real `mooncake master` processes
on loopback (3 masters, short TTLs), stores of this process and of helper
processes, and cleanup of every process and /dev/shm file they made. The
`tls_cluster` variant runs its masters with mutual TLS (a development PKI
from `mooncake certs init`); its stores set up with `MOONCAKE_TLS_*`.

The `mooncake` binary is `$MOONCAKE_BIN`, else `target/release/mooncake` of
this repository (`cargo build --release --bin mooncake`). Every wait has a
timeout; a failing wait raises with the masters' log tails.
"""

import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from mooncake_rs.store import MooncakeDistributedStore

REPO = Path(__file__).resolve().parents[2]

# The frameworks tier needs torch and the frameworks: it runs in its own venv
# (frameworks/venv.sh) when MOONCAKE_FRAMEWORKS=1, as .ci/run does.
collect_ignore = [] if os.environ.get("MOONCAKE_FRAMEWORKS") == "1" else ["frameworks"]
HELPER = Path(__file__).with_name("helper_store.py")

# Short TTLs: a dead store expires in seconds, a read's KV lease lasts 0.5 s.
MASTER_FLAGS = ["--client_ttl=3", "--default_kv_lease_ttl=500"]
START_TIMEOUT_S = 30
STOP_GRACE_S = 5
LOG_TAIL_LINES = 30
SEGMENT_BYTES = 64 << 20
LOCAL_BUFFER_BYTES = 16 << 20


def mooncake_bin() -> str:
    path = os.environ.get("MOONCAKE_BIN") or str(REPO / "target" / "release" / "mooncake")
    if not os.access(path, os.X_OK):
        pytest.exit(f"{path} not found: run `cargo build --release --bin mooncake` (or set MOONCAKE_BIN)", 2)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, timeout_s, cond, interval_s=0.05):
    """Polls `cond` until it returns a truthy value; raises after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class Registered:
    """A ctypes buffer registered with a store (`close` unregisters it)."""

    def __init__(self, store, size):
        self.store, self.size = store, size
        self.buf = ctypes.create_string_buffer(size)
        self.ptr = ctypes.addressof(self.buf)
        assert store.register_buffer(self.ptr, size) == 0

    def write(self, offset, data):
        ctypes.memmove(self.ptr + offset, data, len(data))

    def read(self, offset, size):
        return ctypes.string_at(self.ptr + offset, size)

    def close(self):
        assert self.store.unregister_buffer(self.ptr) == 0


class Cluster:
    """Three masters (the `mooncake` binary) in a temporary directory; with
    `tls`, mutual TLS with certificates of `<dir>/tls`."""

    def __init__(self, masters=3, flags=MASTER_FLAGS, tls=False):
        self.bin = mooncake_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="mooncake-pytest-"))
        self.flags = list(flags)
        self.tls_dir = self.dir / "tls" if tls else None
        if self.tls_dir:
            subprocess.run(
                [self.bin, "certs", "init", str(self.tls_dir), f"--masters={masters}"],
                capture_output=True, timeout=30, check=True,
            )
        self.ids = list(range(1, masters + 1))
        self.addrs = {i: f"127.0.0.1:{free_port()}" for i in self.ids}
        self.procs = {}
        self.shm_files = set()
        for i in self.ids:
            self.start_master(i)
        self.wait_for_leader()

    @property
    def masters(self) -> str:
        return ",".join(self.addrs[i] for i in self.ids)

    def tls_files(self, role):
        """(cert, key, ca) of `role` (`master-1`, `store`, `client`, `admin`), or None without TLS."""
        if not self.tls_dir:
            return None
        return (str(self.tls_dir / f"{role}.pem"), str(self.tls_dir / f"{role}-key.pem"),
                str(self.tls_dir / "ca.pem"))

    def tls_flags(self, role):
        files = self.tls_files(role)
        if not files:
            return []
        return [f"--tls-{name}={path}" for name, path in zip(("cert", "key", "ca"), files)]

    def tls_env(self, role="client"):
        """The `MOONCAKE_TLS_*` variables of `role` ({} without TLS)."""
        files = self.tls_files(role)
        if not files:
            return {}
        return dict(zip(("MOONCAKE_TLS_CERT", "MOONCAKE_TLS_KEY", "MOONCAKE_TLS_CA"), files))

    def start_master(self, i):
        initial = ",".join(f"{j}={self.addrs[j]}" for j in self.ids)
        args = [
            self.bin, "master", f"--id={i}", f"--listen={self.addrs[i]}",
            f"--data-dir={self.dir / f'master-{i}'}", f"--http=127.0.0.1:{free_port()}",
            f"--initial-cluster={initial}", f"--cluster-secret-file={self.dir / 'cluster.secret'}", *self.flags,
            *self.tls_flags(f"master-{i}"),
        ]
        log = open(self.dir / f"master-{i}.log", "ab")
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def status(self):
        out = subprocess.run(
            [self.bin, "status", "--json", f"--masters={self.masters}", *self.tls_flags("client")],
            capture_output=True, timeout=10, check=False,
        )
        try:
            return json.loads(out.stdout)
        except ValueError:
            return {}

    def leader(self):
        """The id of the master all running masters follow, or None."""
        s = self.status()
        leader = s.get("leader_id")
        running = [m for m in s.get("masters", []) if m.get("reachable")]
        if not leader or not running or leader not in self.procs or self.procs[leader].poll() is not None:
            return None
        return leader if all(m.get("leader_id") == leader for m in running) else None

    def wait_for_leader(self, timeout_s=START_TIMEOUT_S):
        try:
            return wait_for("a leader", timeout_s, self.leader, interval_s=0.1)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.log_tails()}") from None

    def kill(self, i):
        p = self.procs[i]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=STOP_GRACE_S)

    def log_tails(self):
        out = []
        for i in self.ids:
            lines = (self.dir / f"master-{i}.log").read_text(errors="replace").splitlines()
            out.append(f"---- master {i} ----")
            out.extend(lines[-LOG_TAIL_LINES:])
        return "\n".join(out)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=STOP_GRACE_S)
        for path in self.shm_files:
            Path(path).unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class Stores:
    """Stores made by a test, closed (and their shm files removed) after it."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.stores = []
        self.helpers = []

    def open(self, segment=SEGMENT_BYTES, buffer=LOCAL_BUFFER_BYTES, hostname="127.0.0.1", protocol="tcp", **kw):
        s = MooncakeDistributedStore()
        rc = s.setup(hostname, "P2PHANDSHAKE", segment, buffer, protocol, "", self.cluster.masters, **kw)
        assert rc == 0, f"setup returned {rc}"
        self.stores.append(s)
        if s._segment_shm_path():
            self.cluster.shm_files.add(s._segment_shm_path())
        return s

    def open_admin(self):
        """A store acting as the cluster's admin (MOONCAKE_ADMIN_TOKEN_FILE at setup)."""
        os.environ["MOONCAKE_ADMIN_TOKEN_FILE"] = str(self.cluster.dir / "master-1" / "admin.token")
        try:
            return self.open(segment=0)
        finally:
            del os.environ["MOONCAKE_ADMIN_TOKEN_FILE"]

    def helper(self, segment=SEGMENT_BYTES):
        """A store in another Python process (see helper_store.py)."""
        h = HelperStore(self.cluster, segment)
        self.helpers.append(h)
        return h

    def close_all(self):
        for s in self.stores:
            s.close()
        for h in self.helpers:
            h.stop()


class HelperStore:
    """A Python process contributing a segment; it obeys one command per line."""

    def __init__(self, cluster, segment):
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), cluster.masters, str(segment)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        hello = self.answer()
        self.hostname, self.shm = hello["hostname"], hello["shm"]
        cluster.shm_files.add(self.shm)

    def answer(self, timeout_s=START_TIMEOUT_S):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"the helper store did not answer within {timeout_s} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the helper store exited ({self.proc.wait(timeout=STOP_GRACE_S)})")
        doc = json.loads(line)
        assert "error" not in doc, doc
        return doc

    def command(self, cmd, **args):
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=STOP_GRACE_S * 2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_GRACE_S)


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def tls_cluster():
    """Masters with mutual TLS; stores need a certificate of its CA."""
    c = Cluster(tls=True)
    yield c
    c.stop()


@pytest.fixture
def store_node(cluster):
    """A `mooncake store` process with `--http` (standalone mode's store
    node): yields its HTTP address and its `/standalone` answer."""
    http = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [cluster.bin, "store", "--masters", cluster.masters, "--segment-size", "64MiB",
         "--listen", "127.0.0.1:0", "--http", http],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )

    def standalone():
        try:
            with urllib.request.urlopen(f"http://{http}/standalone", timeout=2) as r:
                info = json.loads(r.read())
                return info if info["mounted"] else None
        except OSError:
            return None

    try:
        info = wait_for("the store node to serve its segment", 30, standalone)
        yield http, info
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def stores(cluster):
    s = Stores(cluster)
    yield s
    s.close_all()


@pytest.fixture
def store(stores):
    """A store that contributes a segment (the store-node role in-process)."""
    return stores.open()


@pytest.fixture
def client(stores, store):
    """A pure client (no segment) of a cluster with one segment."""
    return stores.open(segment=0)
