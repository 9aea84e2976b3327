"""store.watch: the masters' object events as a Python iterator, in commit
order, for routers (docs/EVENTS.md); resumable from a revision."""

import pytest

from conftest import wait_for
from mooncake_rs.store import KVEventWatch, MooncakeDistributedStore, WatchCompactedError


def next_events(watch, n, timeout_s=10):
    """The next `n` events of `watch` (fails if they do not come in time)."""
    out = []
    for _ in range(n):
        e = watch.poll(timeout_s)
        assert e is not None, f"no event within {timeout_s} s after {out}"
        out.append(e)
    return out


def test_a_router_sees_each_change_once_in_order_and_can_resume(store, client):
    watch = store.watch("t97/")
    assert isinstance(watch, KVEventWatch)
    assert client.put("t97/a", b"0123456789") == 0
    assert client.put("t97/b", b"xy") == 0
    assert client.put("other/c", b"not watched") == 0
    wait_for("t97/a to be removable", 5, lambda: client.remove("t97/a") == 0, interval_s=0.1)
    a, b, gone = next_events(watch, 3)
    assert (a["kind"], a["key"], a["size"], a["cause"]) == ("stored", "t97/a", 10, "put")
    assert (b["kind"], b["key"], b["size"]) == ("stored", "t97/b", 2)
    assert (gone["kind"], gone["key"], gone["version"], gone["cause"]) == ("removed", "t97/a", a["version"], "remove")
    assert a["revision"] < b["revision"] < gone["revision"]
    assert a["replicas"] and all(r["tier"] == "memory" and r["host"] for r in a["replicas"])
    assert watch.poll(0.3) is None, "nothing else changed under t97/"
    assert watch.next_revision > gone["revision"]
    # A router that restarts resumes from a revision and sees the same changes.
    again = store.watch("t97/", from_revision=a["revision"])
    assert [e["key"] for e in next_events(again, 3)] == ["t97/a", "t97/b", "t97/a"]
    # Iteration yields the same dicts.
    it = iter(store.watch("t97/", from_revision=b["revision"]))
    assert next(it)["key"] == "t97/b"


def test_watch_needs_a_set_up_store():
    with pytest.raises(RuntimeError, match="setup"):
        MooncakeDistributedStore().watch()
    assert issubclass(WatchCompactedError, RuntimeError)
