"""Mutual TLS: a store set up with `MOONCAKE_TLS_*` (or the dict's or the
JSON config file's `tls_cert`, `tls_key`, `tls_ca`) talks to masters that require client
certificates, serves its own segment with TLS, and reads and writes another
process's segment over TLS; a partial set of files is refused at setup."""

import json

from conftest import LOCAL_BUFFER_BYTES, SEGMENT_BYTES, Stores
from mooncake_rs.mooncake_config import MooncakeConfig
from mooncake_rs.store import MooncakeDistributedStore, ReplicateConfig

INVALID_PARAMS = -600
TLS_VARS = ("MOONCAKE_TLS_CERT", "MOONCAKE_TLS_KEY", "MOONCAKE_TLS_CA")


def on(hostname):
    cfg = ReplicateConfig()
    cfg.preferred_segment = hostname
    return cfg


def endpoints(store, key):
    descs = store.batch_get_replica_desc([key]).get(key, [])
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint for d in descs)


def test_objects_cross_processes_over_tls(tls_cluster, monkeypatch):
    # Why: with TLS on, every hop — masters, this process's segment, the
    # helper's segment — needs a certificate of the cluster's CA.
    for name, path in tls_cluster.tls_env("client").items():
        monkeypatch.setenv(name, path)
    stores = Stores(tls_cluster)
    try:
        here = stores.open()
        other = stores.helper()  # inherits the variables
        client = stores.open(segment=0)
        assert here.health_check() == 0
        # Written over TLS into the helper's segment, read back over TLS.
        assert here.put("t80/there", b"to the helper", on(other.hostname)) == 0
        assert endpoints(here, "t80/there") == [other.hostname]
        assert client.get("t80/there") == b"to the helper"
        assert other.command("get", key="t80/there")["hex"] == b"to the helper".hex()
        # The helper reads this process's segment: served with TLS here.
        payload = bytes(range(256)) * 1024
        assert client.put("t80/here", payload, on(here.get_hostname())) == 0
        assert endpoints(client, "t80/here") == [here.get_hostname()]
        assert other.command("get", key="t80/here")["hex"] == payload.hex()
        assert client.get("t80/here") == payload
    finally:
        stores.close_all()


def test_the_dict_form_takes_the_tls_files(tls_cluster, monkeypatch):
    # Why: `setup(config)` carries everything in one dict, TLS included.
    for name in TLS_VARS:
        monkeypatch.delenv(name, raising=False)
    cert, key, ca = tls_cluster.tls_files("client")
    s = MooncakeDistributedStore()
    cfg = {
        "local_hostname": "127.0.0.1",
        "global_segment_size": SEGMENT_BYTES,
        "local_buffer_size": LOCAL_BUFFER_BYTES,
        "protocol": "tcp",
        "master_server_addr": tls_cluster.masters,
        "tls_cert": cert,
        "tls_key": key,
        "tls_ca": ca,
    }
    assert s.setup(cfg) == 0
    try:
        tls_cluster.shm_files.add(s._segment_shm_path())
        assert s.put("t80/dict", b"over tls") == 0
        assert s.get("t80/dict") == b"over tls"
    finally:
        s.close()


def test_a_partial_set_of_tls_files_is_refused_at_setup(tls_cluster, monkeypatch, capfd):
    # Why: two of three files is a typo, never "TLS off": setup says which is missing.
    cert, _, ca = tls_cluster.tls_files("client")
    for name in TLS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MOONCAKE_TLS_CERT", cert)
    monkeypatch.setenv("MOONCAKE_TLS_CA", ca)
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", tls_cluster.masters) == INVALID_PARAMS
    assert "lacks MOONCAKE_TLS_KEY" in capfd.readouterr().err
    monkeypatch.delenv("MOONCAKE_TLS_CERT")
    monkeypatch.delenv("MOONCAKE_TLS_CA")
    rc = s.setup({"local_hostname": "127.0.0.1", "master_server_addr": tls_cluster.masters, "tls_ca": ca})
    assert rc == INVALID_PARAMS
    assert "lacks tls_cert, tls_key" in capfd.readouterr().err


def test_a_json_config_file_carries_the_tls_files(tls_cluster, monkeypatch, tmp_path):
    # Why: deployments configure through MOONCAKE_CONFIG_PATH; its TLS fields
    # reach setup (as the dict form) without any variable.
    for name in TLS_VARS:
        monkeypatch.delenv(name, raising=False)
    cert, key, ca = tls_cluster.tls_files("client")
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({
        "local_hostname": "127.0.0.1",
        "global_segment_size": SEGMENT_BYTES,
        "local_buffer_size": "4MB",
        "protocol": "tcp",
        "master_server_address": tls_cluster.masters,
        "tls_cert": cert,
        "tls_key": key,
        "tls_ca": ca,
    }))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    s = MooncakeDistributedStore()
    assert MooncakeConfig.load_from_env().setup(s) == 0
    try:
        tls_cluster.shm_files.add(s._segment_shm_path())
        assert s.put("t80/json", b"configured") == 0
        assert s.get("t80/json") == b"configured"
    finally:
        s.close()
