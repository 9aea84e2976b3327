"""``python -m mooncake_rs.bench --trace FILE``: the store judged as a KV
cache on a request trace, through the Python API, as an inference engine's
connector uses it. The same replay as the Rust ``mooncake bench trace``
(benches/src/trace/), with the segment in the Python process that calls.

Each request of the trace (one JSON object a line: ``timestamp`` in ms,
``hash_ids`` the prompt's chain of blocks) is, in trace order, closed loop:

1. a lookup of all its blocks in one call (ours ``batch_probe_key``, which
   takes no KV lease; upstream 0.3.13 has no probe, so ``batch_is_exist``);
2. a load of the stored prefix (the leading blocks the lookup found) into a
   registered buffer, every byte checked against the block's id; a block
   found by the lookup but gone at the load is *lost* (a miss);
3. a store of the blocks after what was loaded, from a registered buffer.

``--mode batch`` makes the calls vLLM's Mooncake connector makes (one
``batch_get_into`` of the prefix, one ``batch_put_from`` of the rest);
``single`` one ``get_into`` / ``put_from`` per block. Block ``id`` is the
16 bytes ``struct.pack('<QQ', id, id * 0x9E3779B97F4A7C15 mod 2**64)``
repeated, stored under ``trace/{id}``.

Each (system, mode) starts from nothing: its masters (ours ``mooncake up
--stores=0``, upstream's ``mooncake_master``) and ``--clients`` Python
processes, each contributing ``segment_bytes / clients`` through
``setup`` (as every worker of vLLM's connector contributes its share);
client ``w`` replays every ``clients``-th request from ``w``. Ours
pre-faults its segment (``MOONCAKE_PREFAULT``); upstream's is written and
cleared once first. Both are judged against an exact LRU cache of
``segment_bytes // block_bytes`` blocks and an unbounded cache, replayed on
the same requests in trace order.

Ours counts a put as *kept* (not stored) when the lookup had found its
block: our puts answer 0 either way (first writer wins), where upstream's
answer ``OBJECT_ALREADY_EXISTS``.

The client role runs under either library's Python as a script (upstream's
venv has no mooncake_rs): only the orchestrator imports ``mooncake_rs``.
"""

import ctypes
import json
import os
import struct
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

MiB = 1 << 20
BLOCK_MIX = 0x9E3779B97F4A7C15
# A request's blocks at most (a longer chain is a malformed or foreign file).
REQUEST_BLOCKS_MAX = 4096
BLOCK_BYTES_MAX = 64 * MiB
# Upstream refuses a segment under 16 MiB.
CLIENT_SEGMENT_MIN = 16 * MiB
CLIENTS_MAX = 16
ERROR_TEXTS_MAX = 3
LOCAL_BUFFER_BYTES = 16 * MiB
WARM_OBJECT_BYTES = 4 * MiB
# One client's replay may take this long at most.
REPLAY_TIMEOUT_S = 1800
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
MODES = ("batch", "single")


# ------------------------------------------------- pure: trace, blocks, bounds

def load_trace(path, limit):
    """The first ``limit`` requests of the trace at ``path``: ``[(timestamp_ms, [block ids])]``."""
    out = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                ids = [int(i) for i in doc["hash_ids"]]
                ts = int(doc["timestamp"])
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}: line {number}: not a request (`timestamp` and `hash_ids` expected): {e}")
            if len(ids) > REQUEST_BLOCKS_MAX:
                raise SystemExit(f"{path}: line {number}: {len(ids)} blocks, more than {REQUEST_BLOCKS_MAX}")
            out.append((ts, ids))
    if not out:
        raise SystemExit(f"{path}: no request in the trace")
    return out


def block(block_id, nbytes):
    """The bytes of a trace block (benches/src/trace/blocks.rs)."""
    unit = struct.pack("<QQ", block_id, (block_id * BLOCK_MIX) & 0xFFFFFFFFFFFFFFFF)
    return (unit * (nbytes // 16 + 1))[:nbytes]


def bounds(requests, capacity_blocks):
    """``(refs, hits)`` of a cache of ``capacity_blocks`` (None: unbounded)
    replaying ``requests`` (benches/src/trace/bounds.rs): each request hits
    its longest cached prefix, then touches every block, in order (the least
    recently used goes beyond the capacity)."""
    cache, refs, hits = OrderedDict(), 0, 0
    for _, ids in requests:
        prefix = 0
        for b in ids:
            if b not in cache:
                break
            prefix += 1
        refs, hits = refs + len(ids), hits + prefix
        for b in ids:
            cache[b] = None
            cache.move_to_end(b)
            while capacity_blocks is not None and len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return refs, hits


def quantile(values, p):
    """benches/src/stats.rs's quantile: the sample at round((n - 1) * p)."""
    if not values:
        return None
    v = sorted(values)
    return v[round((len(v) - 1) * p)]


# ------------------------------------------------ the client role (a script)

class Outcome(dict):
    """What one replay measured (the fields of benches/src/trace/outcome.rs)."""

    def __init__(self):
        super().__init__(requests=0, refs=0, hits=0, lost_after_lookup=0, stored=0, kept_existing=0,
                         failed=0, corrupt=0, error_texts=[], load_ns=[], store_ns=[], wall_ns=0)

    def bad(self, what, kind="failed"):
        self[kind] += 1
        if len(self["error_texts"]) < ERROR_TEXTS_MAX:
            self["error_texts"].append(what)


def lookup(store, keys, lease_free, out):
    """Per key: was it found (a key after an error counts as not found)."""
    if lease_free:
        answers, call = store.batch_probe_key(keys), "batch_probe_key"
    else:
        answers, call = store.batch_is_exist(keys), "batch_is_exist"
    found = []
    for key, rc in zip(keys, answers):
        if rc < 0 and all(found):
            out.bad(f"{call} {key}: returned {rc}")
        found.append(rc == 1)
    return found


def load(store, ids, keys, prefix, bb, ptr, mode, out):
    """Loads the first ``prefix`` blocks; how many came with the right bytes."""
    ptrs = [ptr + k * bb for k in range(prefix)]
    if mode == "batch":
        rcs = store.batch_get_into(keys[:prefix], ptrs, [bb] * prefix)
    else:
        rcs = [store.get_into(k, p, bb) for k, p in zip(keys[:prefix], ptrs)]
    for k, rc in enumerate(rcs):
        if rc == bb and ctypes.string_at(ptrs[k], bb) == block(ids[k], bb):
            continue
        if rc >= 0:
            out.bad(f"get {keys[k]}: {rc} bytes, not the block's", "corrupt")
        elif rc == OBJECT_NOT_FOUND:
            out["lost_after_lookup"] += 1
        else:
            out.bad(f"get {keys[k]}: returned {rc}")
        return k
    return prefix


def store_rest(store, ids, keys, found, bb, ptr, mode, out):
    """Stores ``ids`` under ``keys``; ``found`` is what the lookup said of each."""
    ptrs = [ptr + k * bb for k in range(len(ids))]
    for i, p in zip(ids, ptrs):
        ctypes.memmove(p, block(i, bb), bb)
    t = time.perf_counter_ns()
    if mode == "batch":
        rcs = store.batch_put_from(keys, ptrs, [bb] * len(keys))
    else:
        rcs = [store.put_from(k, p, bb) for k, p in zip(keys, ptrs)]
    out["store_ns"].append(time.perf_counter_ns() - t)
    for key, rc, was_found in zip(keys, rcs, found):
        if rc == OBJECT_ALREADY_EXISTS or (rc == 0 and was_found):
            out["kept_existing"] += 1
        elif rc == 0:
            out["stored"] += 1
        else:
            out.bad(f"put {key}: returned {rc}")


def replay(store, job):
    """One client's share of the trace, closed loop."""
    bb, mode, reqs, lease_free = job["block_bytes"], job["mode"], job["requests"], job["lease_free"]
    most = max((len(ids) for _, ids in reqs), default=1)
    span = 2 * most * bb
    buf = ctypes.create_string_buffer(span)
    loads = ctypes.addressof(buf)
    stores = loads + most * bb
    if store.register_buffer(loads, span) != 0:
        raise RuntimeError(f"register_buffer of {span} bytes failed")
    out = Outcome()
    start = time.monotonic()
    for _, ids in reqs:
        keys = [f"trace/{i}" for i in ids]
        t = time.perf_counter_ns()
        found = lookup(store, keys, lease_free, out)
        prefix = next((k for k, f in enumerate(found) if not f), len(found))
        loaded = load(store, ids, keys, prefix, bb, loads, mode, out) if prefix else 0
        out["load_ns"].append(time.perf_counter_ns() - t)
        out["requests"] += 1
        out["refs"] += len(ids)
        out["hits"] += loaded
        if loaded < len(ids):
            # The block the load stopped at is not there (or not readable), whatever the lookup said.
            was_found = [False] + found[loaded + 1:]
            store_rest(store, ids[loaded:], keys[loaded:], was_found, bb, stores, mode, out)
    out["wall_ns"] = int((time.monotonic() - start) * 1e9)
    store.unregister_buffer(loads)
    return out


def warm(store, nbytes):
    """Writes ``nbytes`` once in 4 MiB objects and removes them: the
    segment's first page faults are paid before anything is measured."""
    buf = ctypes.create_string_buffer(WARM_OBJECT_BYTES)
    ptr = ctypes.addressof(buf)
    store.register_buffer(ptr, WARM_OBJECT_BYTES)
    failed = sum(1 for i in range(nbytes // WARM_OBJECT_BYTES)
                 if store.put_from(f"trace-warm/{i}", ptr, WARM_OBJECT_BYTES) != 0)
    store.unregister_buffer(ptr)
    return {"removed": store.remove_all(True), "failed": failed}


def client_role(impl, masters, metadata, segment_bytes):
    """Sets up (contributing ``segment_bytes``), says ready, then answers
    one JSON line per job line on stdin until it closes."""
    # Answers go to the original stdout; whatever the library prints there goes to the log.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    if impl == "ours":
        os.environ["MOONCAKE_PREFAULT"] = "1"
        from mooncake_rs.store import MooncakeDistributedStore
    else:
        from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, segment_bytes, LOCAL_BUFFER_BYTES, "tcp", "", masters)
    out.write(json.dumps({"ready": True} if rc == 0 else {"error": f"setup returned {rc}"}) + "\n")
    out.flush()
    if rc != 0:
        return 1
    for line in sys.stdin:
        job = json.loads(line)
        try:
            answer = warm(store, job["warm"]) if "warm" in job else replay(store, job)
        except Exception as e:  # a bad job is answered; the orchestrator stops the run
            answer = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    store.close()
    return 0


# ----------------------------------------------------------- the orchestrator

class Plan:
    """What a run replays, and on what (``--quick`` or a full run, with
    what the command line set instead)."""

    def __init__(self, args):
        self.trace = args.trace
        self.requests = args.requests or (300 if args.quick else 1500)
        self.block_bytes = args.block_bytes
        self.segment_bytes = args.segment_bytes or ((64 if args.quick else 256) * MiB)
        self.clients = args.clients
        self.modes = list(MODES) if args.mode == "both" else [args.mode]
        self.upstream = not args.no_upstream
        self.args = args

    def validate(self):
        """Refuses impossible plans, naming the flag to change."""
        if self.requests < 1:
            raise SystemExit("--requests must be at least 1")
        if not 1 <= self.clients <= CLIENTS_MAX:
            raise SystemExit(f"--clients must be 1 to {CLIENTS_MAX}")
        if not 16 <= self.block_bytes <= BLOCK_BYTES_MAX:
            raise SystemExit(f"--block-bytes must be 16 bytes to {BLOCK_BYTES_MAX // MiB} MiB")
        if self.segment_bytes < 16 * self.block_bytes:
            raise SystemExit(f"--segment-bytes {self.segment_bytes} holds fewer than 16 blocks: give it more memory")
        if self.client_segment_bytes() < CLIENT_SEGMENT_MIN:
            raise SystemExit(f"--segment-bytes / --clients is under {CLIENT_SEGMENT_MIN // MiB} MiB "
                             "(upstream's smallest segment): give more memory or fewer clients")
        if self.args.masters:
            raise SystemExit("--trace starts its own masters (an empty cache per mode): drop --masters")

    def client_segment_bytes(self):
        return self.segment_bytes // self.clients // MiB * MiB

    def capacity_blocks(self):
        return self.segment_bytes // self.block_bytes


class TraceClient:
    """One client process of a system (its Python runs this file)."""

    def __init__(self, b, procs, python, impl, masters, metadata, segment_bytes, log):
        self.b, self.what = b, f"{impl} trace client (log: {log})"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "w") as f:
            self.proc = procs.start([str(python), os.path.abspath(__file__), impl, masters, metadata,
                                     str(segment_bytes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=f, env=env)

    def ready(self):
        doc = json.loads(self.b.read_line(self.proc, self.what, self.b.START_TIMEOUT_S))
        if "error" in doc:
            raise RuntimeError(f"{self.what}: {doc['error']}")

    def send(self, job):
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout_s):
        doc = json.loads(self.b.read_line(self.proc, self.what, timeout_s))
        if "error" in doc:
            raise RuntimeError(f"{self.what}: {doc['error']}")
        return doc


def merge(outcomes):
    total = Outcome()
    for o in outcomes:
        for k in ("requests", "refs", "hits", "lost_after_lookup", "stored", "kept_existing", "failed", "corrupt"):
            total[k] += o[k]
        total["error_texts"] = (total["error_texts"] + o["error_texts"])[:ERROR_TEXTS_MAX]
        total["load_ns"] += o["load_ns"]
        total["store_ns"] += o["store_ns"]
        total["wall_ns"] = max(total["wall_ns"], o["wall_ns"])
    return total


def replay_system(b, plan, requests, impl, mode, logs):
    """One (system, mode) from nothing: masters, clients, replay, stop.
    The merged outcome, or a string saying why upstream could not run."""
    procs = b.Procs()
    logs = Path(logs) / f"{impl}-{mode}"
    logs.mkdir()
    try:
        if impl == "ours":
            python, masters, metadata = sys.executable, b.start_our_masters(plan.args, procs, logs), "P2PHANDSHAKE"
        else:
            python, masters, metadata = b.start_upstream_master(procs, logs)
            if python is None:
                return masters
        clients = [TraceClient(b, procs, python, impl, masters, metadata, plan.client_segment_bytes(),
                               logs / f"client-{w}.log") for w in range(plan.clients)]
        for c in clients:
            c.ready()
        if impl == "upstream":
            # As the Rust bench: three quarters of the segment, in 4 MiB objects.
            clients[0].send({"warm": plan.segment_bytes // 4 * 3 // WARM_OBJECT_BYTES * WARM_OBJECT_BYTES})
            clients[0].answer(b.JOB_TIMEOUT_S)
        for w, c in enumerate(clients):
            c.send({"requests": requests[w::plan.clients], "block_bytes": plan.block_bytes, "mode": mode,
                    "lease_free": impl == "ours"})
        return merge(c.answer(REPLAY_TIMEOUT_S) for c in clients)
    finally:
        procs.stop()


def summary(system, mode, o, lru_rate):
    rate = o["hits"] / o["refs"] if o["refs"] else 0.0

    def ms(ns, p):
        return None if not ns else quantile(ns, p) / 1e6

    return {
        "system": system, "mode": mode, "requests": o["requests"], "refs": o["refs"], "hits": o["hits"],
        "hit_pct": rate * 100, "of_lru": rate / lru_rate if lru_rate else None, "stored": o["stored"],
        "kept_existing": o["kept_existing"], "failed": o["failed"], "corrupt": o["corrupt"],
        "lost": o["lost_after_lookup"],
        "requests_per_s": o["requests"] / (o["wall_ns"] / 1e9) if o["wall_ns"] else 0.0,
        "load_p50_ms": ms(o["load_ns"], 0.5), "load_p99_ms": ms(o["load_ns"], 0.99),
        "store_p50_ms": ms(o["store_ns"], 0.5), "store_p99_ms": ms(o["store_ns"], 0.99),
        "error_texts": o["error_texts"],
    }


def upstream_version(b):
    """The upstream wheel's version, from its dist-info folder's name."""
    found = sorted(b.UPSTREAM_VENV.glob("lib/python*/site-packages/mooncake_transfer_engine*.dist-info"))
    return found[0].name.removesuffix(".dist-info").split("-")[1] if found else "?"


def run(args):
    """Every (system, mode) in turn, and the bounds; the result document."""
    import shutil
    import tempfile

    from mooncake_rs import bench as b

    plan = Plan(args)
    plan.validate()
    requests = load_trace(plan.trace, plan.requests)
    lru_refs, lru_hits = bounds(requests, plan.capacity_blocks())
    _, unbounded_hits = bounds(requests, None)
    lru_rate = lru_hits / lru_refs if lru_refs else 0.0
    systems = [("ours", "mooncake-rs")]
    if plan.upstream:
        systems.append(("upstream", f"upstream {upstream_version(b)}"))
    runs, notes = [], []
    logs = tempfile.mkdtemp(prefix="mooncake-pytrace-")
    try:
        for mode in plan.modes:
            for impl, name in systems:
                if impl == "upstream" and notes:
                    continue  # the baseline stopped once: it stays stopped
                print(f"trace: {name}, {mode} calls, {plan.clients} client processes", file=sys.stderr, flush=True)
                try:
                    o = replay_system(b, plan, requests, impl, mode, logs)
                except (RuntimeError, OSError, ValueError) as e:
                    if impl == "ours":
                        raise
                    o = f"{e}"
                if isinstance(o, str):
                    notes.append(f"upstream baseline stopped at its {mode} replay: {o}")
                    continue
                runs.append(summary(name, mode, o, lru_rate))
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    bound_rows = [{"system": "exact LRU, same capacity", "hit_pct": lru_rate * 100, "of_lru": 1.0 if lru_rate else None},
                  {"system": "unbounded cache", "hit_pct": unbounded_hits / lru_refs * 100 if lru_refs else 0.0,
                   "of_lru": unbounded_hits / lru_hits if lru_hits else None}]
    return {
        "trace": str(plan.trace), "requests": len(requests), "block_references": lru_refs,
        "clients": plan.clients, "block_bytes": plan.block_bytes, "segment_bytes": plan.segment_bytes,
        "capacity_blocks": plan.capacity_blocks(), "runs": runs, "bounds": bound_rows, "notes": notes,
    }


COLUMNS = [("system", "system", 24, "s"), ("mode", "mode", 6, "s"), ("requests", "requests", 8, "d"),
           ("hit_pct", "hit %", 6, ".2f"), ("of_lru", "/LRU", 5, ".2f"), ("stored", "stored", 7, "d"),
           ("failed", "failed", 6, "d"), ("corrupt", "corrupt", 7, "d"), ("lost", "lost", 5, "d"),
           ("requests_per_s", "req/s", 8, ".1f"), ("load_p50_ms", "load p50", 8, ".2f"),
           ("load_p99_ms", "load p99", 8, ".2f"), ("store_p50_ms", "store p50", 9, ".2f"),
           ("store_p99_ms", "store p99", 9, ".2f")]


def report(doc):
    def cell(row, key, width, fmt):
        v = row.get(key)
        text = "-" if v is None else format(v, fmt)
        return text.ljust(width) if fmt == "s" else text.rjust(width)

    head = " ".join(name.ljust(w) if f == "s" else name.rjust(w) for _, name, w, f in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in doc["runs"] + doc["bounds"]:
        lines.append(" ".join(cell(row, k, w, f) for k, _, w, f in COLUMNS))
    lines.append(f"{doc['requests']} requests ({doc['block_references']} block references) of {doc['trace']}; "
                 f"{doc['clients']} client processes; blocks of {doc['block_bytes']} bytes; "
                 f"{doc['segment_bytes'] // MiB} MiB of segments ({doc['capacity_blocks']} blocks); closed loop")
    lines.append("hit % = blocks loaded with the right bytes as the stored prefix of their request, over all block "
                 "references; lookups: ours batch_probe_key (no KV lease), upstream batch_is_exist; "
                 "lost = found by the lookup, gone at the load (a miss); latencies in ms per request")
    for r in doc["runs"]:
        if r["failed"] or r["corrupt"]:
            lines.append(f"{r['system']} {r['mode']}: {r['failed']} failed, {r['corrupt']} corrupt; first: "
                         + "; ".join(r["error_texts"]))
    lines.extend(doc["notes"])
    return "\n".join(lines)


def main(args):
    """The trace bench of ``python -m mooncake_rs.bench --trace``: 1 if ours
    had any failed operation or corrupt read."""
    doc = run(args)
    print(json.dumps(doc, indent=1) if args.json else report(doc))
    ours = [r for r in doc["runs"] if r["system"] == "mooncake-rs"]
    return 1 if any(r["failed"] or r["corrupt"] for r in ours) else 0


if __name__ == "__main__":
    # The client role: bench_trace.py IMPL MASTERS METADATA SEGMENT_BYTES
    sys.exit(client_role(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
