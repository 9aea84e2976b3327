"""Tenants through the Python API (docs/TENANTS.md): `setup(...,
tenant_id=...)` as upstream's; the same key in two tenants is two objects,
and removals reach the caller's tenant only."""

from conftest import wait_for
from mooncake_rs.store import MooncakeDistributedStore

INVALID_PARAMS = -600


def test_the_same_key_in_two_tenants_is_two_objects(stores, store):
    # Why: two models sharing a cluster may hash prompts to the same keys;
    # neither may read, keep or remove the other's KV cache.
    a = stores.open(segment=0, tenant_id="team-a")
    b = stores.open(segment=0, tenant_id="team-b")
    assert a.put("t88/k", b"from a") == 0
    assert b.put("t88/k", b"from b!") == 0
    assert a.get("t88/k") == b"from a" and b.get("t88/k") == b"from b!"
    assert b.get_size("t88/k") == 7
    assert store.get("t88/k") == b"" and store.is_exist("t88/k") == 0, "the default tenant sees neither"
    assert a.put("t88/only-a", b"x") == 0
    assert b.is_exist("t88/only-a") == 0
    assert b.batch_is_exist(["t88/k", "t88/only-a"]) == [1, 0]
    assert b.batch_probe_key(["t88/k", "t88/only-a"]) == [1, 0] and b.probe_key("t88/only-a") == 0
    # b's reads leased its object for 0.5 s: remove_all skips it till then.
    wait_for("b's remove_all to remove b's one object", 5, lambda: b.remove_all(False) == 1, interval_s=0.1)
    assert a.get("t88/k") == b"from a" and a.get("t88/only-a") == b"x"
    assert b.get("t88/k") == b""


def test_a_dict_setup_names_its_tenant_and_a_bad_name_fails_setup(cluster, stores, store):
    d = MooncakeDistributedStore()
    config = {"local_hostname": "127.0.0.1", "master_server_addr": cluster.masters, "global_segment_size": 0,
              "local_buffer_size": 16 << 20, "protocol": "tcp", "tenant_id": "team-dict"}
    assert d.setup(config) == 0
    try:
        assert d.put("t88/dict", b"d") == 0
        other = stores.open(segment=0, tenant_id="team-other")
        assert other.get("t88/dict") == b""
        assert stores.open(segment=0, tenant_id="team-dict").get("t88/dict") == b"d"
    finally:
        d.close()
    bad = MooncakeDistributedStore()
    rc = bad.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster.masters, tenant_id="no spaces")
    assert rc == INVALID_PARAMS
