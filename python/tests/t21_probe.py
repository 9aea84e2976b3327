"""The lease-free existence probe (upstream 0.3.14's `batch_probe_key`,
`probe_key`): the same answers as `batch_is_exist`, but no KV lease, so a
framework's lookups do not keep the objects they found from being removed
or evicted. `LastHitOnly` leases one group, the one the caller will load."""

import pytest

from conftest import Cluster, Stores, wait_for

OBJECT_HAS_LEASE = -706
OBJECT_NOT_FOUND = -704
# A lease long enough that no test here outlives one it took (each takes
# milliseconds), short enough to wait out the election's grace below.
LONG_LEASE_S = 5
LONG_LEASE_FLAGS = ["--client_ttl=3", f"--default_kv_lease_ttl={LONG_LEASE_S * 1000}"]


@pytest.fixture(scope="module")
def long_lease():
    """A store (with a segment) on a cluster whose KV leases last 5 s, once
    a fresh object can be removed: a new leader counts every key as leased
    for one TTL after its election (it cannot know what its predecessor
    leased), which would hide what the lookups below lease."""
    c = Cluster(flags=LONG_LEASE_FLAGS)
    s = Stores(c)
    try:
        store = s.open()

        def removable():
            return store.put("t21/grace", b"g") == 0 and store.remove("t21/grace") == 0

        wait_for("the election's lease grace to end", 4 * LONG_LEASE_S, removable, interval_s=0.2)
        yield store
    finally:
        s.close_all()
        c.stop()


def test_probe_answers_one_zero_and_nothing_for_nothing(client):
    assert client.put_batch(["t21/a", "t21/b"], [b"a", b"b"]) == 0
    assert client.batch_probe_key(["t21/a", "t21/missing", "t21/b"]) == [1, 0, 1]
    assert client.batch_probe_key(["t21/a"], "none", 1) == [1]
    assert client.batch_probe_key(keys=["t21/b"], policy="none", candidate_size=3) == [1]
    assert client.probe_key("t21/a") == 1 and client.probe_key("t21/missing") == 0
    assert client.batch_probe_key([]) == []
    assert client.batch_probe_key([], "LastHitOnly", 2) == []


def test_an_invalid_key_answers_a_negative_code_and_the_others_their_own(client):
    # Why: an empty key is refused by the masters per item, as batch_is_exist's.
    assert client.put("t21/valid", b"v") == 0
    got = client.batch_probe_key(["", "t21/valid"])
    assert got[0] < 0 and got[1] == 1, got
    assert got == client.batch_is_exist(["", "t21/valid"]), "the same codes as batch_is_exist"
    assert client.probe_key("") < 0
    assert client.probe_key("k" * 5000) < 0, "a key over the length limit (4096 bytes)"


def test_unknown_policies_and_sizes_raise_value_error(client):
    with pytest.raises(ValueError, match="^Unknown batch_probe_key policy: LongestPrefix"):
        client.batch_probe_key(["t21/a"], "LongestPrefix")
    with pytest.raises(ValueError, match="candidate_size"):
        client.batch_probe_key(["t21/a"], "LastHitOnly", 0)
    with pytest.raises(ValueError, match="candidate_size"):
        client.batch_probe_key(["t21/a"], "none", -1)
    with pytest.raises(TypeError):
        client.batch_probe_key("t21/a")  # a str is not a list of keys


def test_the_probe_takes_no_lease_while_is_exist_does(long_lease):
    s = long_lease
    assert s.put_batch(["t21/lease/exist", "t21/lease/probe", "t21/lease/one"], [b"1", b"2", b"3"]) == 0
    # Why: a fresh object carries no lease, so each refusal below is the lookup's.
    assert s.batch_is_exist(["t21/lease/exist"]) == [1]
    assert s.remove("t21/lease/exist") == OBJECT_HAS_LEASE, "batch_is_exist leased what it found"
    assert s.batch_probe_key(["t21/lease/probe"]) == [1]
    assert s.remove("t21/lease/probe") == 0, "batch_probe_key leased nothing"
    assert s.probe_key("t21/lease/one") == 1
    assert s.remove("t21/lease/one") == 0, "probe_key leased nothing"
    assert s.is_exist("t21/lease/exist") == 1


def test_last_hit_only_leases_the_last_complete_group_of_the_leading_hits(long_lease):
    s = long_lease
    keys = [f"t21/lho/{i}" for i in range(6)]
    assert s.put_batch(keys[:4] + keys[5:], [b"x"] * 5) == 0
    # Leading hits 0..3 (4 is missing; 5 is a hit after the miss): candidate_size 2 leases 2 and 3.
    assert s.batch_probe_key(keys, "LastHitOnly", 2) == [1, 1, 1, 1, 0, 1]
    assert [s.remove(k) for k in keys] == [0, 0, OBJECT_HAS_LEASE, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND, 0]
    # A leading run shorter than one group leases nothing.
    assert s.put("t21/lho/short", b"x") == 0
    assert s.batch_probe_key(["t21/lho/short", "t21/lho/missing"], "LastHitOnly", 2) == [1, 0]
    assert s.remove("t21/lho/short") == 0
