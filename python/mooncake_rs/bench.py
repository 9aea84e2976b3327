"""Python bench of ``MooncakeDistributedStore``: mooncake-rs against upstream
Mooncake's wheel in the same run, through the same Python API.

    python -m mooncake_rs.bench [--quick] [--json] [--masters HOST:PORT,...]
    python -m mooncake_rs.bench --trace FILE [--quick] [--json] [--requests N] ...

For each object size (4 KiB, 64 KiB, 4 MiB) and client thread count (1, 8)
it measures ``put_from``, ``get_into`` and ``batch_get_into`` (registered
buffers, TCP), and the layer-wise session calls frameworks make
(``session_put``: ``batch_put_session_start``, one
``batch_put_from_multi_buffer_ranges`` per layer, ``batch_put_session_end``;
``session_get``: ``batch_get_session_start``, one
``batch_get_into_multi_buffer_ranges`` per layer, ``batch_get_session_end``;
a batch of keys, 4 layers each), and prints ops/s (objects), GB/s and
latency percentiles (per call sequence) per system.

Topology, the same for both systems: one *store* process contributes the
segment, one *client* process runs the threads; both are Python processes
using the library under test. Ours talks to 3 masters (Raft, fsync before
every acknowledgement) that ``mooncake up`` starts (the binary is
``--mooncake-bin``, ``$MOONCAKE_BIN``, ``mooncake`` on PATH, or
``target/release/mooncake`` under the current directory) unless
``--masters`` names a running cluster. Upstream runs its ``mooncake_master``
with the built-in HTTP metadata server (no HA, nothing replicated), from the
venv in ``$MOONCAKE_UPSTREAM_VENV`` or ``~/.cache/mooncake-rs/upstream-venv-0.3.13``
(created by ``mooncake bench``); without it the upstream columns are empty.

Both stores' segments are written once and cleared before the timed phases
(no first-touch page faults in either). This file runs under either
library's Python: it imports neither at the top.

With ``--trace FILE`` it replays a request trace instead, as a KV cache's
connector would (``mooncake_rs.bench_trace``).
"""

import argparse
import ctypes
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

KiB, MiB = 1 << 10, 1 << 20
SIZES = (4 * KiB, 64 * KiB, 4 * MiB)
THREADS = (1, 8)
OPS = ("put", "get_into", "batch_get_into", "session_put", "session_get")
# Keys per batched call, by object size (a batch of 4 MiB objects is 16 MiB).
BATCH_KEYS = {4 * KiB: 32, 64 * KiB: 16, 4 * MiB: 4}
BATCHED = ("batch_get_into", "session_put", "session_get")
# Ranges (layers) per object in the session phases; each a call of its own.
LAYERS = 4
SEGMENT_BYTES = 3 << 30
# What the put phases of one (size, threads) pair may store in all (its
# rounds share it): the puts stop there.
PHASE_BYTES_MAX = 1 << 30
WARM_BYTES = 2 << 30
START_TIMEOUT_S = 60
JOB_TIMEOUT_S = 600
UPSTREAM_VENV = Path(os.environ.get("MOONCAKE_UPSTREAM_VENV", "") or
                     Path.home() / ".cache" / "mooncake-rs" / "upstream-venv-0.3.13")


# ------------------------------------------------------------- both libraries

def open_store(impl, masters, metadata, segment_bytes, buffer_bytes):
    if impl == "ours":
        from mooncake_rs.store import MooncakeDistributedStore
    else:
        from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, segment_bytes, buffer_bytes, "tcp", "", masters)
    if rc != 0:
        raise RuntimeError(f"{impl}: setup returned {rc}")
    return store


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_phase(store, op, size, threads, seconds, prefix, max_bytes=PHASE_BYTES_MAX):
    """``op`` on ``threads`` threads for about ``seconds``; keys prefix/t/i.

    Puts write new keys (at most ``max_bytes`` in all); reads cycle over
    the keys the put phase of the same prefix wrote (``stored`` per thread).
    """
    batch = BATCH_KEYS[size] if op in BATCHED else 1
    per_thread_keys = max(batch, max_bytes // size // threads)
    # Session puts store new keys too, a quarter of the put phase's budget.
    calls_max = {"put": per_thread_keys, "session_put": max(1, per_thread_keys // 4 // batch)}.get(op)
    step = size // LAYERS
    span = size * batch
    buf = ctypes.create_string_buffer(os.urandom(span * threads), span * threads)
    base = ctypes.addressof(buf)
    if store.register_buffer(base, span * threads) != 0:
        raise RuntimeError("register_buffer failed")
    lat, errors, counts = [[] for _ in range(threads)], [0] * threads, [0] * threads
    deadline = time.monotonic() + seconds

    def worker(t):
        ptr, i = base + t * span, 0
        while time.monotonic() < deadline and (calls_max is None or i < calls_max):
            if op == "put":
                t0 = time.perf_counter()
                ok = store.put_from(f"{prefix}/{t}/{i}", ptr, size) == 0
            elif op == "get_into":
                t0 = time.perf_counter()
                ok = store.get_into(f"{prefix}/{t}/{i % stored[t]}", ptr, size) == size
            elif op == "batch_get_into":
                keys = [f"{prefix}/{t}/{(i * batch + k) % stored[t]}" for k in range(batch)]
                ptrs = [ptr + k * size for k in range(batch)]
                t0 = time.perf_counter()
                ok = store.batch_get_into(keys, ptrs, [size] * batch) == [size] * batch
            elif op == "session_put":
                keys = [f"{prefix}/s/{t}/{i * batch + k}" for k in range(batch)]
                t0 = time.perf_counter()
                ok = store.batch_put_session_start(keys, [size] * batch) == [0] * batch
                for layer in range(LAYERS):
                    ptrs = [[ptr + k * size + layer * step] for k in range(batch)]
                    got = store.batch_put_from_multi_buffer_ranges(keys, ptrs, [[step]] * batch,
                                                                   [[layer * step]] * batch)
                    ok = ok and got == [step] * batch
                ok = store.batch_put_session_end(keys) == [0] * batch and ok
            else:
                keys = [f"{prefix}/{t}/{(i * batch + k) % stored[t]}" for k in range(batch)]
                t0 = time.perf_counter()
                ok = store.batch_get_session_start(keys) == [0] * batch
                for layer in range(LAYERS):
                    ptrs = [[ptr + k * size + layer * step] for k in range(batch)]
                    got = store.batch_get_into_multi_buffer_ranges(keys, ptrs, [[step]] * batch,
                                                                   [[layer * step]] * batch)
                    ok = ok and got == [step] * batch
                store.batch_get_session_end(keys)
            lat[t].append(time.perf_counter() - t0)
            errors[t] += 0 if ok else 1
            i += 1
        counts[t] = i

    stored = run_phase.stored.get((prefix, threads), [0] * threads)
    if op in ("get_into", "batch_get_into", "session_get") and min(stored) == 0:
        return None
    if op in ("session_put", "session_get") and not hasattr(store, "batch_put_session_start"):
        return None  # an upstream wheel without sessions
    start = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(timeout=seconds + JOB_TIMEOUT_S)
    wall = time.perf_counter() - start
    if op == "put":
        run_phase.stored[(prefix, threads)] = counts[:]
    store.unregister_buffer(base)
    all_lat = sorted(x for per in lat for x in per)
    calls = sum(counts)
    return {
        "ops_per_s": calls * batch / wall,
        "gb_per_s": calls * batch * size / wall / 1e9,
        "p50_ms": percentile(all_lat, 0.5) * 1e3,
        "p99_ms": percentile(all_lat, 0.99) * 1e3,
        "calls": calls,
        "errors": sum(errors),
    }


run_phase.stored = {}


def warm(store, nbytes):
    """Writes ``nbytes`` once in 4 MiB objects and removes them."""
    size = 4 * MiB
    buf = ctypes.create_string_buffer(size)
    store.register_buffer(ctypes.addressof(buf), size)
    for i in range(nbytes // size):
        store.put_from(f"warm/{i}", ctypes.addressof(buf), size)
    store.unregister_buffer(ctypes.addressof(buf))
    store.remove_all(True)


def client_role(args):
    """Answers one JSON line per job line on stdin: {"warm": bytes},
    {"clear": true} or {"op", "size", "threads", "seconds", "prefix"}."""
    store = open_store(args.impl, args.masters, args.metadata, 0, 64 * MiB)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if "warm" in job:
            warm(store, job["warm"])
            result = {}
        elif "clear" in job:
            result = {"removed": store.remove_all(True)}
        else:
            result = run_phase(store, job["op"], job["size"], job["threads"], job["seconds"], job["prefix"],
                               job["max_bytes"])
        print(json.dumps(result), flush=True)
    store.close()


def store_role(args):
    """Contributes the segment until stdin closes. Ours touches every page
    of it at setup (MOONCAKE_PREFAULT): the warm-up's objects are removed
    before the timed phases, and their space stays retired for one KV lease
    (10 s), so without it later puts would land on untouched pages."""
    if args.impl == "ours":
        os.environ["MOONCAKE_PREFAULT"] = "1"
    store = open_store(args.impl, args.masters, args.metadata, args.segment_bytes, 16 * MiB)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.read()
    store.close()


# ----------------------------------------------------------- the orchestrator

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_line(proc, what, timeout_s):
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"{what}: no answer within {timeout_s} s (exit {proc.poll()})")
    return line


class Procs:
    """Child processes of one system, stopped in reverse order."""

    def __init__(self):
        self.procs = []

    def start(self, args, **kw):
        p = subprocess.Popen(args, text=True, **kw)
        self.procs.append(p)
        return p

    def stop(self):
        """Store processes end when their stdin closes; the others on SIGINT."""
        for p in reversed(self.procs):
            if p.poll() is None:
                if p.stdin:
                    p.stdin.close()
                else:
                    p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


class System:
    """One system under test: its store process and its client process
    (plus whatever runs its masters, in ``procs``)."""

    def __init__(self, python, impl, masters, metadata, procs, logs):
        self.impl, self.procs = impl, procs
        me = [python, os.path.abspath(__file__), "--impl", impl, "--masters", masters, "--metadata", metadata]
        with open(Path(logs) / f"{impl}-store.log", "w") as log:
            store = procs.start(me + ["--role", "store", "--segment-bytes", str(SEGMENT_BYTES)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        read_line(store, f"{impl} store (log: {logs}/{impl}-store.log)", START_TIMEOUT_S)
        self.log = f"{logs}/{impl}-client.log"
        with open(self.log, "w") as log:
            self.client = procs.start(me + ["--role", "client"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=log)
        read_line(self.client, f"{impl} client (log: {self.log})", START_TIMEOUT_S)

    def job(self, **job):
        self.client.stdin.write(json.dumps(job) + "\n")
        self.client.stdin.flush()
        return json.loads(read_line(self.client, f"{self.impl} client (log: {self.log})", JOB_TIMEOUT_S))


def find_mooncake(explicit):
    for candidate in [explicit, os.environ.get("MOONCAKE_BIN"), shutil.which("mooncake"),
                      str(Path.cwd() / "target" / "release" / "mooncake")]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("no mooncake binary: give --mooncake-bin or --masters, or build it "
                     "(cargo build --release --bin mooncake)")


def start_our_masters(args, procs, logs):
    """``args.masters``, or the masters of a ``mooncake up --stores=0`` started in ``procs``."""
    if args.masters:
        return args.masters
    up = procs.start([find_mooncake(args.mooncake_bin), "up", "--stores=0",
                      "--dir=" + tempfile.mkdtemp(prefix="ours-cluster-", dir=logs)],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return re.match(r"masters: (\S+)", read_line(up, "mooncake up", START_TIMEOUT_S)).group(1)


def start_ours(args, procs, logs):
    return System(sys.executable, "ours", start_our_masters(args, procs, logs), "P2PHANDSHAKE", procs, logs)


def start_upstream_master(procs, logs):
    """Upstream's ``mooncake_master`` (with its HTTP metadata server) started
    in ``procs``: ``(python, master address, metadata URL)``, or ``(None, why, None)``."""
    python, master = UPSTREAM_VENV / "bin" / "python", UPSTREAM_VENV / "bin" / "mooncake_master"
    if not (python.exists() and master.exists()):
        return None, f"no upstream venv at {UPSTREAM_VENV} (`mooncake bench` creates it)", None
    rpc, http, metrics = free_port(), free_port(), free_port()
    with open(Path(logs) / "upstream-master.log", "w") as log:
        procs.start([str(master), f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
                     "--enable_http_metadata_server=true", f"--http_metadata_server_port={http}",
                     "--http_metadata_server_host=127.0.0.1", f"--metrics_port={metrics}",
                     "--metrics_host=127.0.0.1"], stdout=log, stderr=log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", rpc), timeout=1).close()
            socket.create_connection(("127.0.0.1", http), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                return None, "upstream mooncake_master did not listen", None
            time.sleep(0.1)
    return python, f"127.0.0.1:{rpc}", f"http://127.0.0.1:{http}/metadata"


def start_upstream(procs, logs):
    """Upstream's master and processes, or why not."""
    python, master, metadata = start_upstream_master(procs, logs)
    if python is None:
        return None, master
    return System(str(python), "upstream", master, metadata, procs, logs), ""


def run(args):
    """Each round runs every system alone, one after the other (the order
    alternates between rounds): started, warmed, every phase, stopped. Only
    one system's processes live at a time, so neither pays for the other's
    idle threads (upstream's transfer engine polls)."""
    logs = tempfile.mkdtemp(prefix="mooncake-pybench-")
    starters = [("ours", lambda procs: (start_ours(args, procs, logs), ""))]
    note = "--no-upstream" if args.no_upstream else ""
    if not args.no_upstream:
        starters.append(("upstream", lambda procs: start_upstream(procs, logs)))
    runs = {}
    try:
        for round_index in range(args.rounds):
            for impl, start in starters if round_index % 2 == 0 else list(reversed(starters)):
                procs = Procs()
                try:
                    system, why = start(procs)
                    if system is None:
                        note = why
                        continue
                    print(f"round {round_index + 1}/{args.rounds}: {impl}", file=sys.stderr, flush=True)
                    system.job(warm=args.warm_bytes)
                    for size in SIZES:
                        for threads in THREADS:
                            # Reads use the keys of the put phase just before.
                            prefix = f"bench/{size}/{threads}/{round_index}"
                            for op in OPS:
                                r = system.job(op=op, size=size, threads=threads, seconds=args.seconds,
                                               prefix=prefix, max_bytes=PHASE_BYTES_MAX)
                                if r is not None:
                                    runs.setdefault((impl, size, threads, op), []).append(r)
                            system.job(clear=True)
                finally:
                    procs.stop()
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    results = {}
    for (impl, size, threads, op), rs in runs.items():
        median = sorted(rs, key=lambda r: r["ops_per_s"])[len(rs) // 2]
        results.setdefault(impl, []).append({"size": size, "threads": threads, "op": op, **median})
    return results.get("ours", []), results.get("upstream"), note


def fmt_size(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def report(ours, upstream, note):
    up = {(r["size"], r["threads"], r["op"]): r for r in upstream or []}
    head = (f"{'size':>7} {'thr':>3} {'op':<15} {'ours ops/s':>11} {'GB/s':>6} {'p50 ms':>7} {'p99 ms':>7} | "
            f"{'up ops/s':>10} {'GB/s':>6} {'p50 ms':>7} {'p99 ms':>7} | {'ours/up':>7}")
    lines = [head, "-" * len(head)]
    for r in ours:
        u = up.get((r["size"], r["threads"], r["op"]))
        left = (f"{fmt_size(r['size']):>7} {r['threads']:>3} {r['op']:<15} {r['ops_per_s']:>11,.0f} "
                f"{r['gb_per_s']:>6.2f} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f}")
        if u:
            right = (f"{u['ops_per_s']:>10,.0f} {u['gb_per_s']:>6.2f} {u['p50_ms']:>7.3f} {u['p99_ms']:>7.3f} | "
                     f"{r['ops_per_s'] / max(u['ops_per_s'], 1e-9):>7.2f}")
        else:
            right = f"{'-':>10} {'-':>6} {'-':>7} {'-':>7} | {'-':>7}"
        errs = r["errors"] + (u["errors"] if u else 0)
        lines.append(f"{left} | {right}" + (f"  ({errs} failed calls)" if errs else ""))
    if note:
        lines.append(f"upstream baseline skipped: {note}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short phases (proves the bench runs)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--masters", default="", help="use these masters instead of starting `mooncake up`")
    p.add_argument("--mooncake-bin", default="", help="the mooncake binary for `mooncake up`")
    p.add_argument("--no-upstream", action="store_true", help="skip the upstream baseline")
    p.add_argument("--seconds", type=float, default=2.0, help="length of each timed phase")
    p.add_argument("--rounds", type=int, default=1,
                   help="run each phase this often per system (alternating); report the median round")
    t = p.add_argument_group("trace replay (mooncake_rs.bench_trace)")
    t.add_argument("--trace", default="", metavar="FILE",
                   help="replay this request trace (JSON lines: timestamp ms, hash_ids) instead")
    t.add_argument("--requests", type=int, default=0, help="requests of the trace replayed (1500; --quick 300)")
    t.add_argument("--block-bytes", type=int, default=32 * KiB, help="bytes of one block (32768)")
    t.add_argument("--clients", type=int, default=1, help="client processes, each with its share of the segment")
    t.add_argument("--mode", choices=["batch", "single", "both"], default="both",
                   help="batch calls (vLLM's connector) or one call per block")
    p.add_argument("--segment-bytes", type=int, default=0,
                   help="with --trace: the segment bytes of all clients together (256 MiB; --quick 64 MiB)")
    p.add_argument("--warm-bytes", type=int, default=WARM_BYTES, help=argparse.SUPPRESS)
    p.add_argument("--role", choices=["orchestrate", "store", "client"], default="orchestrate", help=argparse.SUPPRESS)
    p.add_argument("--impl", choices=["ours", "upstream"], default="ours", help=argparse.SUPPRESS)
    p.add_argument("--metadata", default="P2PHANDSHAKE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "store":
        return store_role(args)
    if args.role == "client":
        return client_role(args)
    if args.trace:
        from mooncake_rs import bench_trace

        return bench_trace.main(args)
    if args.quick:
        args.seconds, args.warm_bytes = 0.3, 256 * MiB
    ours, upstream, note = run(args)
    if args.json:
        print(json.dumps({"ours": ours, "upstream": upstream, "upstream_note": note}, indent=1))
    else:
        print(report(ours, upstream, note))
    failed = sum(r["errors"] for r in ours)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
