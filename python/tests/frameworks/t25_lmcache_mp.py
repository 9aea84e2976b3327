"""LMCache's multi-process mode (its main path; the only one for multi-group
KV) with mooncake-rs as its L2 tier through `mooncake_rs.lmcache`, LMCache's
plugin L2 adapter of ours: LMCache's own MP server (`python -m
lmcache.v1.multiprocess.server`, a process of its own as in production)
loads the plugin by its module path; an engine-side client of LMCache's own
(`EngineDrivenTransferContext` over ZMQ, the path vLLM's CPU integration
takes) stores a request's KV, the server pushes its chunks to our store,
its L1 is cleared, and a retrieve of the same tokens prefetches them back
from the store: the bytes are compared.

Against upstream (`MOONCAKE_FRAMEWORKS_BACKEND=upstream`) the same adapter
runs over upstream's wheel (`mooncake_module: mooncake.store`) and master:
LMCache's own `mooncake_store` adapter needs its C++ extension
(`lmcache.lmcache_mooncake`), which LMCache's wheel does not ship.

Stood in for: nothing. The KV is CPU tensors (LMCache's engine-driven
transfer mode runs without CUDA); no vLLM engine is driven here (t30 drives
vLLM's own Mooncake connector).
"""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from harness import (  # noqa: F401 (fixtures)
    UPSTREAM,
    cluster,
    free_port,
    listening,
    remove_new_shm_files,
    stored_keys,
    wait_for,
)

from lmcache.v1.multiprocess.custom_types import IPCCacheServerKey  # noqa: E402
from lmcache.v1.multiprocess.transfer_context.worker_transfer import EngineDrivenTransferContext  # noqa: E402
from lmcache.v1.multiprocess.transport.zmq_impl import create_request_client  # noqa: E402

CHUNK = 16  # tokens a chunk (the server's --chunk-size)
BLOCK = 4  # tokens a KV block of the engine
BLOCKS = 32  # blocks of the engine's paged KV
MODEL = "tiny-mp"
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    """LMCache's MP server with our plugin as its only L2 adapter."""
    params = {
        "master_server_addr": cluster.masters,  # the key upstream's setup(dict) reads; ours takes both
        "metadata_server": cluster.metadata_server,
        "protocol": "tcp",
        "local_hostname": "127.0.0.1",
        "global_segment_size": "64MB",
        "local_buffer_size": "16MB",
        "mooncake_module": "mooncake.store" if UPSTREAM else "mooncake_rs.store",
    }
    adapter = {"type": "plugin", "module_path": "mooncake_rs.lmcache", "class_name": "MooncakeL2Adapter",
               "adapter_params": params}
    port = free_port()
    log_path = tmp_path_factory.mktemp("lmcache-mp") / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lmcache.v1.multiprocess.server", "--host", "127.0.0.1", "--port", str(port),
         "--l1-size-gb", "0.0625", "--eviction-policy", "LRU", "--chunk-size", str(CHUNK),
         "--supported-transfer-mode", "auto", "--disable-observability", "--l2-adapter", json.dumps(adapter)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "LMCACHE_TRACK_USAGE": "false"},
    )
    log.close()
    try:
        wait_for("LMCache's MP server to listen", 120,
                 lambda: proc.poll() is None and listening(port) or proc.poll() is not None, interval_s=0.2)
        assert proc.poll() is None, f"LMCache's MP server exited:\n{log_path.read_text()[-4000:]}"
        yield port, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


FAILED = re.compile(r"Traceback|\b(ERROR|CRITICAL)\b")
L2_WARNING = re.compile(r"\bWARNING\b.*(l2_adapter|storage_controllers|store_controller|prefetch_controller|mooncake)")


def problems_in(log_path):
    """The server's lines that say something failed: tracebacks, ERROR, and
    the WARNING lines of its L2 tier (our adapter, LMCache's L2 controllers)."""
    text = log_path.read_text(errors="replace").splitlines()
    return [line for line in text if FAILED.search(line) or L2_WARNING.search(line)]


def test_kv_stored_through_the_mp_server_loads_back_from_our_store(server, cluster):
    port, log_path = server
    client = create_request_client(f"tcp://127.0.0.1:{port}")
    torch.manual_seed(0)
    kv = {f"layer_{i}": torch.randn(2, BLOCKS, BLOCK, 2, 8) for i in range(2)}
    per_chunk = CHUNK // BLOCK
    ctx = EngineDrivenTransferContext(1, client)
    ctx.register(kv, MODEL, 1, per_chunk, mq_timeout=TIMEOUT_S)
    chunks = 3
    tokens = list(range(100, 100 + chunks * CHUNK))
    key = IPCCacheServerKey.from_token_ids(MODEL, 1, 0, tokens, 0, len(tokens), request_id="r1")
    before = set(stored_keys(cluster))
    assert ctx.submit_store("r1", key, kv, [list(range(chunks * per_chunk))], None, per_chunk).result(TIMEOUT_S)

    # The server's store controller pushes the chunks to L2: our store.
    def new_keys():
        return sorted(set(stored_keys(cluster)) - before)

    wait_for("the chunks to reach the store", TIMEOUT_S, lambda: len(new_keys()) == chunks)
    assert all(k.startswith(f"{MODEL}@") for k in new_keys()), new_keys()

    # L1 emptied: what the retrieve finds can only come from L2.
    assert client.clear(True).result(TIMEOUT_S) is not False
    client.lookup(key.no_worker_id_version(), 1).result(TIMEOUT_S)
    hits = wait_for_prefetch(client, "r1")
    assert hits == chunks, f"the server found {hits} of {chunks} chunks after its L1 was cleared"
    dst = {name: torch.zeros_like(t) for name, t in kv.items()}
    first = BLOCKS - chunks * per_chunk
    dst_blocks = list(range(first, BLOCKS))
    assert ctx.submit_retrieve("r1", key, dst, [dst_blocks], None, per_chunk).result(TIMEOUT_S)
    for name, t in kv.items():
        assert torch.equal(t[:, : chunks * per_chunk], dst[name][:, first:]), f"{name}'s KV differs"
    client.end_session("r1")
    assert problems_in(log_path) == [], problems_in(log_path)


@pytest.mark.skipif(UPSTREAM, reason="removes the chunks with our CLI (`mooncake rm`)")
def test_chunks_removed_from_the_store_are_not_found_after_l1_is_cleared(server, cluster):
    """The negative control: with the chunks gone from our store and L1
    cleared, the same lookup finds nothing, so the hits above were ours."""
    port, log_path = server
    client = create_request_client(f"tcp://127.0.0.1:{port}")
    kv = {f"layer_{i}": torch.randn(2, BLOCKS, BLOCK, 2, 8) for i in range(2)}
    per_chunk = CHUNK // BLOCK
    ctx = EngineDrivenTransferContext(1, client)
    ctx.register(kv, MODEL, 1, per_chunk, mq_timeout=TIMEOUT_S)
    tokens = list(range(500, 500 + 2 * CHUNK))
    key = IPCCacheServerKey.from_token_ids(MODEL, 1, 0, tokens, 0, len(tokens), request_id="r2")
    before = set(stored_keys(cluster))
    assert ctx.submit_store("r2", key, kv, [list(range(2 * per_chunk))], None, per_chunk).result(TIMEOUT_S)
    wait_for("the chunks to reach the store", TIMEOUT_S, lambda: len(set(stored_keys(cluster)) - before) == 2)
    for k in set(stored_keys(cluster)) - before:
        subprocess.run([cluster.bin, "rm", k, f"--masters={cluster.masters}"], check=True, timeout=30,
                       capture_output=True)
    assert client.clear(True).result(TIMEOUT_S) is not False
    client.lookup(key.no_worker_id_version(), 1).result(TIMEOUT_S)
    assert wait_for_prefetch(client, "r2") == 0
    client.end_session("r2")
    assert problems_in(log_path) == [], problems_in(log_path)


def wait_for_prefetch(client, request_id):
    """The chunks the server's prefetch found (it answers None until done)."""
    found = []

    def done():
        hits = client.query_prefetch_status(request_id).result(TIMEOUT_S)
        found[:] = [hits]
        return hits is not None

    wait_for("LMCache's prefetch to finish", TIMEOUT_S, done, interval_s=0.05)
    return found[0]
