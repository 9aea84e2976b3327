"""Load driver for upstream Mooncake's Python client, used by `mooncake bench`.

benches/src/baseline/upstream.rs writes this file into a temporary directory
and runs it with the Python of a venv that has the upstream wheel:

    python upstream_driver.py store  MASTER_ADDR METADATA_URL SEGMENT_BYTES
    python upstream_driver.py client MASTER_ADDR METADATA_URL 0

Both roles print one JSON line once set up ({"ready": true} or {"error": ...}).
The store only contributes its segment and waits for stdin to close. A client
is one concurrent client of the bench: it reads one JSON job per stdin line,
runs the timed loop itself (so no hop between processes is inside the
timing) and answers one JSON line.

A job: {"op", "prefix", "client", "size", "batch", "ops_min", "ops_max",
"time_s", "stored"}. Its keys are prefix/client/i (batches: prefix/client/i/k).
Writes number i from 0 up; reads cycle over the first `stored` numbers;
"remove" removes each of them once. The answer: the latency of every
successful op in ns (the Rust side computes the percentiles), bytes and keys
moved, failed keys with the first few return codes, wall time, ops done.

A trace job ({"op": "trace", "requests": [[timestamp_ms, [block ids]], ...],
"block_bytes", "speedup", "mode": "batch"|"single"}) replays a client's share
of a request trace as benches/src/trace/replay.rs does for ours, and answers
the fields of benches/src/trace/outcome.rs.
"""

import ctypes
import json
import os
import struct
import sys
import time

from mooncake.store import MooncakeDistributedStore

# The library's staging buffer: unused by the *_from / *_into calls measured here.
LOCAL_BUFFER_BYTES = 16 << 20
ERROR_TEXTS_MAX = 3


def say(out, doc):
    out.write(json.dumps(doc) + "\n")
    out.flush()


class Buffer:
    """One registered buffer of random (so pre-faulted) bytes, grown on demand."""

    def __init__(self, store):
        self.store, self.buf = store, None

    def ptr(self, nbytes):
        if self.buf is None or len(self.buf) < nbytes:
            if self.buf is not None:
                self.store.unregister_buffer(ctypes.addressof(self.buf))
            self.buf = ctypes.create_string_buffer(os.urandom(nbytes), nbytes)
            rc = self.store.register_buffer(ctypes.addressof(self.buf), nbytes)
            if rc != 0:
                raise RuntimeError(f"register_buffer of {nbytes} bytes returned {rc}")
        return ctypes.addressof(self.buf)


def one_op(store, op, keys, ptr, size):
    """One operation; returns (keys that worked, bytes moved, a failing return code or None)."""
    key = keys[0]
    if op == "put":
        rc, ok = store.put_from(key, ptr, size), 0
    elif op == "put_meta":  # reserve and complete, no bytes: the control path of a put
        rc = store.batch_put_session_start(keys, [size])[0]
        rc, ok = (store.batch_put_session_end(keys)[0] if rc == 0 else rc), 0
    elif op == "get":
        rc, ok = store.get_into(key, ptr, size), size
    elif op == "replica_desc":  # the replica list alone, no bytes
        rc, ok = len(store.get_replica_desc(key)), 1
    elif op == "exist":
        rc, ok = store.is_exist(key), 1
    elif op == "remove":
        rc, ok = store.remove(key, True), 0
    elif op in ("batch_put", "batch_get"):
        ptrs, sizes = [ptr + k * size for k in range(len(keys))], [size] * len(keys)
        if op == "batch_put":
            rcs, ok = store.batch_put_from(keys, ptrs, sizes), 0
        else:
            rcs, ok = store.batch_get_into(keys, ptrs, sizes), size
        good = sum(1 for rc in rcs if rc == ok)
        return good, good * size, next((rc for rc in rcs if rc != ok), None)
    else:
        raise ValueError(f"unknown op {op!r}")
    moves = op in ("put", "get")
    return (1, size if moves else 0, None) if rc == ok else (0, 0, rc)


# Upstream's return codes the trace replay tells apart.
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
BLOCK_MIX = 0x9E3779B97F4A7C15


def block(block_id, nbytes):
    """The bytes of a trace block (benches/src/trace/blocks.rs)."""
    unit = struct.pack("<QQ", block_id, (block_id * BLOCK_MIX) & 0xFFFFFFFFFFFFFFFF)
    return (unit * (nbytes // 16 + 1))[:nbytes]


def trace_job(store, buf, job):
    """One client's share of a trace: per request, batch_is_exist of its
    blocks, a load of the stored prefix (each block's bytes checked), a store
    of the blocks after what was loaded."""
    bb, mode, speedup, reqs = job["block_bytes"], job["mode"], job["speedup"], job["requests"]
    most = max((len(ids) for _, ids in reqs), default=0)
    loads = buf.ptr(2 * most * bb)
    stores = loads + most * bb
    out = {"requests": 0, "refs": 0, "hits": 0, "lost_after_lookup": 0, "stored": 0, "kept_existing": 0,
           "failed": 0, "corrupt": 0, "error_texts": [], "load_ns": [], "store_ns": []}

    def failed(what, kind="failed"):
        out[kind] += 1
        if len(out["error_texts"]) < ERROR_TEXTS_MAX:
            out["error_texts"].append(what)

    start = time.monotonic()
    for ts, ids in reqs:
        if speedup > 0:
            wait = start + ts / 1e3 / speedup - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        keys = [f"trace/{i}" for i in ids]
        t = time.perf_counter_ns()
        prefix = 0
        for rc in store.batch_is_exist(keys):
            if rc != 1:
                if rc < 0:
                    failed(f"batch_is_exist {keys[prefix]}: returned {rc}")
                break
            prefix += 1
        loaded = 0
        if prefix:
            ptrs = [loads + k * bb for k in range(prefix)]
            if mode == "batch":
                rcs = store.batch_get_into(keys[:prefix], ptrs, [bb] * prefix)
            else:
                rcs = [store.get_into(k, p, bb) for k, p in zip(keys[:prefix], ptrs)]
            for k, rc in enumerate(rcs):
                if rc == bb and ctypes.string_at(ptrs[k], bb) == block(ids[k], bb):
                    loaded += 1
                    continue
                if rc == bb:
                    failed(f"get {keys[k]}: not the block's bytes", "corrupt")
                elif rc == OBJECT_NOT_FOUND:
                    out["lost_after_lookup"] += 1
                else:
                    failed(f"get {keys[k]}: returned {rc}")
                break
        out["load_ns"].append(time.perf_counter_ns() - t)
        out["requests"] += 1
        out["refs"] += len(ids)
        out["hits"] += loaded
        if loaded < len(ids):
            rest, rest_keys = ids[loaded:], keys[loaded:]
            ptrs = [stores + k * bb for k in range(len(rest))]
            for i, p in zip(rest, ptrs):
                ctypes.memmove(p, block(i, bb), bb)
            t = time.perf_counter_ns()
            if mode == "batch":
                rcs = store.batch_put_from(rest_keys, ptrs, [bb] * len(rest))
            else:
                rcs = [store.put_from(k, p, bb) for k, p in zip(rest_keys, ptrs)]
            out["store_ns"].append(time.perf_counter_ns() - t)
            for k, rc in zip(rest_keys, rcs):
                if rc == 0:
                    out["stored"] += 1
                elif rc == OBJECT_ALREADY_EXISTS:
                    out["kept_existing"] += 1
                else:
                    failed(f"put {k}: returned {rc}")
    out["wall_ns"] = int((time.monotonic() - start) * 1e9)
    return out


def run_job(store, buf, job):
    """The timed loop; stops as stats::Budget on the Rust side does."""
    if job["op"] == "clear":
        return {"removed": store.remove_all(True)}
    if job["op"] == "trace":
        return trace_job(store, buf, job)
    op, size, batch = job["op"], job["size"], job["batch"]
    ptr = buf.ptr(size * batch)
    reads = op not in ("put", "put_meta", "batch_put")
    stored = job["stored"]
    ops_max = stored if op == "remove" else job["ops_max"]
    if reads and stored == 0:
        ops_max = 0
    base = f"{job['prefix']}/{job['client']}"
    lat, done, keys_ok, nbytes, errors, texts = [], 0, 0, 0, 0, []
    start = time.monotonic()
    deadline, hard = start + job["time_s"], start + 2 * job["time_s"]
    while done < ops_max and time.monotonic() < (hard if done < job["ops_min"] else deadline):
        i = done % stored if reads else done
        keys = [f"{base}/{i}"] if batch == 1 else [f"{base}/{i}/{k}" for k in range(batch)]
        t = time.perf_counter_ns()
        good, moved, bad = one_op(store, op, keys, ptr, size)
        elapsed = time.perf_counter_ns() - t
        if good:
            lat.append(elapsed)
            keys_ok, nbytes = keys_ok + good, nbytes + moved
        if bad is not None:
            errors += len(keys) - good
            if len(texts) < ERROR_TEXTS_MAX:
                texts.append(f"{op} {keys[0]}: returned {bad}")
        done += 1
    wall_ns = int((time.monotonic() - start) * 1e9)
    return {"lat_ns": lat, "done": done, "keys": keys_ok, "bytes": nbytes, "errors": errors,
            "error_texts": texts, "wall_ns": wall_ns}


def main():
    role, master, metadata, segment_bytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    # Answers go to the original stdout; whatever the library prints there goes to the log.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, segment_bytes, LOCAL_BUFFER_BYTES, "tcp", "", master)
    if rc != 0:
        say(out, {"error": f"setup returned {rc}"})
        return 1
    say(out, {"ready": True})
    buf = Buffer(store)
    for line in sys.stdin:
        if role == "store" or not line.strip():
            continue
        try:
            say(out, run_job(store, buf, json.loads(line)))
        except Exception as e:  # a bad job is answered; the driver goes on
            say(out, {"error": f"{type(e).__name__}: {e}"})
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
