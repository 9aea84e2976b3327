"""SGLang's HiCache storage backend `MooncakeStore`
(`sglang.srt.mem_cache.storage.mooncake_store`), unmodified, on mooncake-rs:
SGLang's own test of that backend; pages of a host KV pool stored before and
after a master leader kill and loaded back whole; `standalone_storage` mode,
where a store node holds the cache for the inference process.

The host KV pool is SGLang's own test double (`create_mock_host_kv_cache` of
its test module, a torch tensor with SGLang's page layout): SGLang's real
host pools need a device KV pool, which needs a GPU. The configuration is
SGLang's file (`SGLANG_HICACHE_MOONCAKE_CONFIG_PATH`), read by its own loader.
"""

import uuid

import pytest
import torch
from harness import (  # noqa: F401 (fixtures)
    MiB,
    cluster,
    framework_errors,
    fresh_cluster,
    remove_new_shm_files,
    standalone_node,
    store_node_of_ours,
    write_json,
)
from sglang.srt.mem_cache.storage.mooncake_store import test_mooncake_store as sglang_tests
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import (
    MooncakeHostTensorAllocator,
    MooncakeStore,
)

PAGE_ELEMENTS = 1024  # float32: 4 KiB per entry, two entries (K, V) per page
ENTRIES = 2


@pytest.fixture
def sglang_config(cluster, tmp_path, monkeypatch):
    """Writes SGLang's Mooncake config file (for `cluster`, or the masters
    given) and points SGLang at it; answers a function that rewrites it."""

    def configure(masters=cluster.masters, **overrides):
        doc = {
            "local_hostname": "127.0.0.1",
            "metadata_server": cluster.metadata_server,
            # Split among tensor-parallel ranks (SGLang's own test goes to 8);
            # upstream refuses segments under 16 MiB.
            "global_segment_size": 256 * MiB,
            "protocol": "tcp",
            "device_name": "",
            "master_server_address": masters,
            "check_server": False,
            "standalone_storage": False,
            **overrides,
        }
        path = write_json(tmp_path / "sglang-mooncake.json", doc)
        monkeypatch.setenv("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", str(path))

    configure()
    return configure


def one_rank():
    return sglang_tests.make_hicache_storage_config(is_mla_model=False, tp_rank=0, tp_size=1)


def page(buffer, i):
    """Page `i` of SGLang's mock pool (page_size 1, page-first layout)."""
    n = ENTRIES * PAGE_ELEMENTS
    return buffer[i * n : (i + 1) * n]


def test_sglangs_own_test_of_its_mooncake_backend_passes(sglang_config, framework_errors):
    sglang_tests.test_single_operation()
    for mla, rank, size in [(False, 0, 1), (True, 0, 1), (False, 1, 4), (True, 3, 8)]:
        config = sglang_tests.make_hicache_storage_config(is_mla_model=mla, tp_rank=rank, tp_size=size)
        sglang_tests.test_batch_operation(config)
    assert framework_errors == []


def test_pages_stored_around_a_leader_kill_load_back_whole(fresh_cluster, sglang_config, framework_errors):
    sglang_config(fresh_cluster.masters)
    store = MooncakeStore(one_rank())
    pages = 32
    pool, buffer = sglang_tests.create_mock_host_kv_cache(
        4 * pages * ENTRIES * PAGE_ELEMENTS, entries_per_page=ENTRIES, page_elements=PAGE_ELEMENTS
    )
    store.register_mem_pool_host(pool)
    keys = [f"t10-{uuid.uuid4().hex}" for _ in range(pages)]
    half = pages // 2

    assert store.batch_exists(keys) == 0
    assert all(store.batch_set_v1(keys[:half], torch.arange(half)))
    fresh_cluster.kill(fresh_cluster.wait_for_leader())
    fresh_cluster.wait_for_leader()
    assert all(store.batch_set_v1(keys[half:], torch.arange(half, pages)))
    assert store.batch_exists(keys) == pages

    # Into the pool's second quarter: every page comes back bit for bit.
    assert all(store.batch_get_v1(keys, torch.arange(pages, 2 * pages)))
    for i in range(pages):
        assert torch.equal(page(buffer, i), page(buffer, pages + i)), f"page {i} differs"
    # Storing pages already stored is a no-op that succeeds (SGLang skips them).
    assert all(store.batch_set_v1(keys, torch.arange(pages)))
    assert framework_errors == [], framework_errors


def test_standalone_storage_keeps_pages_in_the_store_node(standalone_node, sglang_config, framework_errors):
    sglang_config(standalone_storage=True, client_server_address=standalone_node)
    pages = 16
    keys = [f"t10-standalone-{uuid.uuid4().hex}" for _ in range(pages)]

    # Two inference processes (here: two backends, each with its own pool
    # from SGLang's allocator for this mode, over Mooncake's host allocator).
    first_pool = standalone_pool(pages)
    first = MooncakeStore(one_rank(), mem_pool=first_pool)
    first.register_mem_pool_host(first_pool)
    assert all(first.batch_set_v1(keys, torch.arange(pages)))

    # The second finds the pages in the store node and loads them.
    second_pool = standalone_pool(pages)
    second = MooncakeStore(one_rank(), mem_pool=second_pool)
    second.register_mem_pool_host(second_pool)
    assert second.batch_exists(keys) == pages
    assert all(second.batch_get_v1(keys, torch.arange(pages)))
    for i in range(pages):
        assert torch.equal(page(first_pool.kv_buffer, i), page(second_pool.kv_buffer, i)), f"page {i} differs"
    assert framework_errors == [], framework_errors


def standalone_pool(pages):
    """SGLang's mock pool holding a buffer of SGLang's allocator for
    standalone mode, filled with random values."""
    elements = pages * ENTRIES * PAGE_ELEMENTS
    allocator = MooncakeHostTensorAllocator()
    pool, _ = sglang_tests.create_mock_host_kv_cache(elements, entries_per_page=ENTRIES, page_elements=PAGE_ELEMENTS)
    pool.kv_buffer = allocator.allocate((elements,), torch.float32)
    pool.kv_buffer.copy_(torch.randn(elements))
    pool.allocator = allocator
    return pool
