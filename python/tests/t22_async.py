"""Upstream 0.3.14's ``MooncakeDistributedStoreAsync`` (``mooncake.async_store``):
the store itself, plus an ``async_<name>`` coroutine for each method, with
the sync call's arguments and answers; a name with no method behind it is
an ``AttributeError``. Read from the 0.3.14 wheel's ``mooncake/async_store.py``
(a subclass whose ``__getattr__`` runs the sync method on the loop's
default executor)."""

import asyncio

import pytest

from conftest import LOCAL_BUFFER_BYTES, SEGMENT_BYTES
from mooncake_rs.async_store import MooncakeDistributedStoreAsync
from mooncake_rs.store import MooncakeDistributedStore

OBJECT_HAS_LEASE = -706
OBJECT_NOT_FOUND = -704


@pytest.fixture
def async_store(cluster):
    s = MooncakeDistributedStoreAsync()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", SEGMENT_BYTES, LOCAL_BUFFER_BYTES, "tcp", "", cluster.masters)
    assert rc == 0, f"setup returned {rc}"
    if s._segment_shm_path():
        cluster.shm_files.add(s._segment_shm_path())
    yield s
    s.close()


def test_the_async_store_is_the_store_with_its_sync_methods(async_store):
    assert isinstance(async_store, MooncakeDistributedStore)
    assert async_store.put("t22/sync", b"s") == 0
    assert async_store.get("t22/sync") == b"s"


def test_async_calls_answer_as_the_sync_ones(async_store):
    async def main():
        assert await async_store.async_put("t22/a", b"alpha") == 0
        assert await async_store.async_get("t22/a") == b"alpha"
        assert await async_store.async_is_exist("t22/a") == 1
        assert await async_store.async_get_size("t22/a") == 5
        assert await async_store.async_batch_probe_key(["t22/a", "t22/none"]) == [1, 0]
        # Keyword arguments pass through.
        assert await async_store.async_put_batch(keys=["t22/b", "t22/c"], values=[b"b", b"c"]) == 0
        assert await async_store.async_get_batch(["t22/b", "t22/c"]) == [b"b", b"c"]
        # A key just read is leased: its remove is refused, as the sync one's.
        assert await async_store.async_remove("t22/a") == async_store.remove("t22/a") == OBJECT_HAS_LEASE
        assert await async_store.async_put("t22/unread", b"u") == 0
        assert await async_store.async_remove("t22/unread") == 0
        assert await async_store.async_get_size("t22/unread") == OBJECT_NOT_FOUND

    asyncio.run(main())


def test_calls_awaited_together_all_complete_with_their_own_answers(async_store):
    # Why: a framework's event loop issues many loads at once; each must get
    # its own object, none blocking the loop or another.
    keys = [f"t22/many/{i}" for i in range(16)]

    async def main():
        puts = await asyncio.gather(*(async_store.async_put(k, k.encode() * 64) for k in keys))
        assert puts == [0] * len(keys)
        gets = await asyncio.gather(*(async_store.async_get(k) for k in keys))
        assert gets == [k.encode() * 64 for k in keys]

    asyncio.run(main())


def test_a_name_without_a_method_is_an_attribute_error(async_store):
    for name in ["async_no_such_call", "no_such_call", "async_"]:
        with pytest.raises(AttributeError, match=name):
            getattr(async_store, name)


def test_the_compat_layer_serves_mooncake_async_store():
    import subprocess
    import sys

    code = (
        "import mooncake_rs.compat; mooncake_rs.compat.install(); "
        "from mooncake.async_store import MooncakeDistributedStoreAsync as A; "
        "from mooncake.store import MooncakeDistributedStore as S; "
        "assert issubclass(A, S); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
