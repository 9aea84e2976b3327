"""LMCache's `mooncakestore` remote connector, unmodified, on mooncake-rs,
driven the way LMCache's storage manager drives it: through its own
`RemoteBackend` (which makes the connector from `remote_url`
`mooncakestore://…`) over its own `LocalCPUBackend` and memory allocator, on
CPU. Memory objects (KV chunks) are put in batches, looked up, and read
back byte for byte: zero-copy (`batch_put_from` / `batch_get_into`, with
`prefer_local_alloc`) and with the chunk metadata stored remotely
(`put_parts` / `batch_get_buffer`); and across a master leader kill.
"""

import asyncio
import threading

import pytest
import torch
from harness import (  # noqa: F401 (fixtures)
    MiB,
    cluster,
    framework_errors,
    fresh_cluster,
    remove_new_shm_files,
    wait_for,
)
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
from lmcache.v1.storage_backend.remote_backend import RemoteBackend

CHUNK_TOKENS = 256
# (layers, K/V, tokens, kv heads, head size): 256 KiB of float16 per chunk.
KV_SHAPE = (2, 2, CHUNK_TOKENS, 2, 64)
TIMEOUT_S = 30


class Lmcache:
    """LMCache's CPU backend and remote backend, with the event loop its
    connector runs on (a thread, as in LMCache's engine)."""

    def __init__(self, masters, metadata_server, save_chunk_meta):
        self.allocated = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        extra = {
            "local_hostname": "127.0.0.1",
            "metadata_server": metadata_server,
            "master_server_address": masters,
            # LMCache 0.5.6 hands `master_server_address` to the dict form of
            # `setup`, which upstream's 0.3.13 wheel reads as
            # `master_server_addr` (it then silently tries 127.0.0.1:50051, and
            # LMCache does not check setup's answer). LMCache forwards
            # `mooncake_*` keys without the prefix: this one reaches both.
            "mooncake_master_server_addr": masters,
            "global_segment_size": str(64 * MiB),
            "local_buffer_size": str(16 * MiB),
            "protocol": "tcp",
            "transfer_timeout": TIMEOUT_S,
            "save_chunk_meta": save_chunk_meta,
            "mooncake_prefer_local_alloc": True,
        }
        self.config = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK_TOKENS, local_cpu=True, max_local_cpu_size=0.1,
            remote_url="mooncakestore://127.0.0.1:0/", remote_serde="naive", extra_config=extra,
        )
        self.metadata = LMCacheMetadata(
            model_name="t20/tiny", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
            kv_dtype=torch.float16, kv_shape=KV_SHAPE, chunk_size=CHUNK_TOKENS,
        )
        self.cpu = LocalCPUBackend(self.config, self.metadata, dst_device="cpu")
        self.remote = RemoteBackend(self.config, self.metadata, self.loop, self.cpu, dst_device="cpu")
        assert self.remote.connection is not None, "LMCache could not make its Mooncake connector"

    def key(self, i):
        return CacheEngineKey("t20/tiny", 1, 0, i, torch.float16)

    def chunks(self, n, seed):
        """`n` memory objects of LMCache's allocator, filled with random bytes."""
        g = torch.Generator().manual_seed(seed)
        objs = []
        for _ in range(n):
            obj = self.cpu.allocate(torch.Size(KV_SHAPE[:2] + (CHUNK_TOKENS, KV_SHAPE[3] * KV_SHAPE[4])),
                                    torch.float16)
            assert obj is not None, "LMCache's CPU allocator is full"
            obj.tensor.copy_(torch.randn(obj.tensor.shape, generator=g, dtype=torch.float32))
            objs.append(obj)
        self.allocated.extend(objs)
        return objs

    def put(self, keys, objs):
        """LMCache's batched put; returns once every key's write completed."""
        done = set()
        lock = threading.Lock()

        def completed(key):
            with lock:
                done.add(key)

        self.remote.batched_submit_put_task(keys, objs, on_complete_callback=completed)
        wait_for("LMCache's puts to complete", TIMEOUT_S, lambda: len(done) == len(keys))

    def close(self):
        for obj in self.allocated:
            obj.ref_count_down()
        self.remote.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture
def lmcache_on(cluster):
    made = []

    def make(save_chunk_meta, on=cluster):
        lm = Lmcache(on.masters, on.metadata_server, save_chunk_meta)
        made.append(lm)
        return lm

    yield make
    for lm in made:
        lm.close()


def assert_read_back(lm, keys, objs):
    got = lm.remote.batched_get_blocking(keys)
    assert [g is not None for g in got] == [True] * len(keys), "a chunk was not read back"
    for i, (g, o) in enumerate(zip(got, objs)):
        assert g.get_size() == o.get_size()
        assert bytes(g.byte_array) == bytes(o.byte_array), f"chunk {i} differs"
        g.ref_count_down()


@pytest.mark.parametrize("save_chunk_meta", [False, True], ids=["zero-copy", "chunk-meta"])
def test_chunks_round_trip_through_lmcaches_remote_backend(lmcache_on, save_chunk_meta, framework_errors):
    lm = lmcache_on(save_chunk_meta)
    keys = [lm.key(1000 * int(save_chunk_meta) + i) for i in range(8)]
    objs = lm.chunks(len(keys), seed=1)
    assert lm.remote.batched_contains(keys) == 0
    lm.put(keys, objs)
    assert framework_errors == [], framework_errors
    assert lm.remote.batched_contains(keys) == len(keys)
    assert all(lm.remote.contains(k) for k in keys)
    assert_read_back(lm, keys, objs)
    if not save_chunk_meta:
        # prefer_local_alloc: the replica is on this process's own segment.
        store = lm.remote.connection._connector.store  # under LMCache's instrumentation wrapper
        for k in keys:
            (replica,) = store.get_replica_desc(k.to_string())
            endpoint = replica.get_memory_descriptor().buffer_descriptor.transport_endpoint
            assert endpoint == store.get_hostname()
    assert framework_errors == [], framework_errors


def test_chunks_put_around_a_leader_kill_read_back_whole(fresh_cluster, lmcache_on, framework_errors):
    fresh_cluster.metadata_server = "P2PHANDSHAKE"
    lm = lmcache_on(False, on=fresh_cluster)
    keys = [lm.key(2000 + i) for i in range(16)]
    objs = lm.chunks(len(keys), seed=2)
    lm.put(keys[:8], objs[:8])
    fresh_cluster.kill(fresh_cluster.wait_for_leader())
    fresh_cluster.wait_for_leader()
    lm.put(keys[8:], objs[8:])
    assert lm.remote.batched_contains(keys) == len(keys)
    assert_read_back(lm, keys, objs)
    assert framework_errors == [], framework_errors
