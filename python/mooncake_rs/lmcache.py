"""LMCache's L2 tier on mooncake-rs: an L2 adapter plugin for LMCache's
multi-process mode (its `lmcache server` and `python -m
lmcache.v1.multiprocess.server`).

LMCache's own Mooncake adapter (`"type": "mooncake_store"`) needs a C++
extension built against Mooncake's headers (`lmcache.lmcache_mooncake`),
which a drop-in cannot provide. LMCache also loads L2 adapters as Python
plugins; this is one, over `mooncake_rs.store.MooncakeDistributedStore`:

    lmcache server --l1-size-gb 4 --eviction-policy LRU \\
        --l2-adapter '{"type": "plugin", "module_path": "mooncake_rs.lmcache",
                       "class_name": "MooncakeL2Adapter",
                       "adapter_params": {"master_server_address": "m1:50051,m2:50051,m3:50051",
                                          "metadata_server": "P2PHANDSHAKE", "protocol": "tcp",
                                          "global_segment_size": "4GB", "local_buffer_size": "512MB"}}'

`adapter_params` are what `mooncake_store` takes: every key but this
adapter's own (`num_workers`, `mooncake_module`) goes to the store's
`setup(dict)`. Keys are LMCache's native-connector strings
(`<model>@<kv_rank:08x>@<group:x>@<chunk hash hex>[@<salt>]`), the ones its
`mooncake_store` adapter writes, so either can read what the other stored.

How it maps LMCache's calls (LMCache's `NativeConnectorL2Adapter` does the
task bookkeeping, event fds and key accounting; this module is the "native
client" it drives):

- store: `batch_put_from` from LMCache's L1 arena, which the adapter
  registers with the store at start (zero copy); a buffer outside it (an
  adapter used without an L1) goes through `put`. A key that exists already
  is stored (first writer wins, as Mooncake's put), not a failure.
- lookup: `batch_is_exist` (1 found; 0 or an error code, not found).
- load: `batch_get_into` into the arena (or `get` and a copy); a key is
  loaded when its bytes landed and match the buffer's size.
- delete (LMCache's L2 eviction, when configured): `batch_remove`.

`mooncake_module` (default `mooncake_rs.store`) names the module whose
`MooncakeDistributedStore` is used: `mooncake.store` runs the same adapter
over upstream's wheel, the yardstick of the tests.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from lmcache.logging import init_logger
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter

# LMCache's logger: its server's log shows this adapter's lines.
logger = init_logger(__name__)

OBJECT_ALREADY_EXISTS = -705
OWN_PARAMS = ("num_workers", "mooncake_module")


class StoreConnector:
    """The "native client" LMCache's `NativeConnectorL2Adapter` drives: batch
    calls run on a small thread pool; each completion is queued with its
    future id and signalled on one eventfd, which LMCache's demux thread
    polls and then drains with `drain_completions`."""

    def __init__(self, store, arena: tuple[int, int] | None, num_workers: int):
        self.store = store
        self.arena = arena
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._done: list = []
        self._pool = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="mooncake-l2")

    # The interface NativeConnectorL2Adapter calls.

    def event_fd(self) -> int:
        return self._efd

    def submit_batch_set(self, keys, views) -> int:
        return self._submit(lambda: self._set(keys, views))

    def submit_batch_get(self, keys, views) -> int:
        return self._submit(lambda: self._get(keys, views))

    def submit_batch_exists(self, keys) -> int:
        return self._submit(lambda: (True, [code == 1 for code in self.store.batch_is_exist(list(keys))]))

    def submit_batch_delete(self, keys) -> int:
        return self._submit(lambda: (True, [code == 0 for code in self.store.batch_remove(list(keys))]))

    def drain_completions(self) -> list:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        os.close(self._efd)

    # The work.

    def _submit(self, work) -> int:
        fid = next(self._ids)
        self._pool.submit(self._finish, fid, work)
        return fid

    def _finish(self, fid, work) -> None:
        try:
            ok, per_key = work()
            error = ""
        except Exception as e:  # reported to LMCache as a failed task, never lost
            logger.warning("mooncake L2 task failed: %r", e)
            ok, per_key, error = False, None, repr(e)
        with self._lock:
            self._done.append((fid, ok, error, per_key))
        os.eventfd_write(self._efd, 1)

    def _address(self, view) -> int | None:
        """The address of `view` when it lies in the registered arena."""
        if self.arena is None or view.readonly:
            return None
        addr = ctypes.addressof((ctypes.c_ubyte * view.nbytes).from_buffer(view.cast("B")))
        start, size = self.arena
        return addr if start <= addr and addr + view.nbytes <= start + size else None

    def _set(self, keys, views):
        keys, addrs = list(keys), [self._address(v) for v in views]
        codes = [0] * len(keys)
        direct = [i for i, a in enumerate(addrs) if a is not None]
        if direct:
            got = self.store.batch_put_from([keys[i] for i in direct], [addrs[i] for i in direct],
                                            [views[i].nbytes for i in direct])
            for i, code in zip(direct, got):
                codes[i] = code
        for i, a in enumerate(addrs):
            if a is None:
                codes[i] = self.store.put(keys[i], bytes(views[i]))
        failed = [(k, c) for k, c in zip(keys, codes) if c != 0 and c != OBJECT_ALREADY_EXISTS]
        if failed:
            logger.warning("mooncake L2 store: %d of %d keys failed, first %s", len(failed), len(keys), failed[:3])
        return not failed, None

    def _get(self, keys, views):
        keys, addrs = list(keys), [self._address(v) for v in views]
        loaded = [False] * len(keys)
        direct = [i for i, a in enumerate(addrs) if a is not None]
        if direct:
            got = self.store.batch_get_into([keys[i] for i in direct], [addrs[i] for i in direct],
                                            [views[i].nbytes for i in direct])
            for i, n in zip(direct, got):
                loaded[i] = n == views[i].nbytes
        for i, a in enumerate(addrs):
            if a is None:
                data = self.store.get(keys[i])
                if len(data) == views[i].nbytes:
                    views[i].cast("B")[:] = data
                    loaded[i] = True
        return True, loaded


class MooncakeL2Adapter(NativeConnectorL2Adapter):
    """LMCache's plugin L2 adapter over a Mooncake store (module doc)."""

    def __init__(self, params: dict | None = None, l1_memory_desc=None, **_):
        params = dict(params or {})
        num_workers = int(params.get("num_workers", 4))
        module = importlib.import_module(str(params.get("mooncake_module", "mooncake_rs.store")))
        setup = {k: str(v) for k, v in params.items() if k not in OWN_PARAMS}
        store = module.MooncakeDistributedStore()
        rc = store.setup(setup)
        if rc != 0:
            raise RuntimeError(f"mooncake L2 adapter: the store's setup({setup}) answered {rc}; check the masters' "
                               "addresses and the segment sizes in adapter_params")
        arena = None
        if l1_memory_desc is not None:
            size = l1_memory_desc.stable_registration_size or l1_memory_desc.size
            rc = store.register_buffer(l1_memory_desc.ptr, size)
            if rc != 0:
                store.close()
                raise RuntimeError(f"mooncake L2 adapter: registering LMCache's L1 arena ({size} bytes) answered {rc}")
            arena = (l1_memory_desc.ptr, size)
        self._store = store
        self._arena = arena
        super().__init__(
            StoreConnector(store, arena, num_workers), type_name="mooncake_rs",
            extra_status={"mooncake_module": module.__name__},
        )

    def close(self) -> None:
        super().close()
        if self._arena is not None:
            self._store.unregister_buffer(self._arena[0])
        self._store.close()
