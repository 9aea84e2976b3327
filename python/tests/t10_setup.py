"""Setting up and closing a store: the 7-argument and dict forms, the
environment loader, hostnames and ports, health, and `mooncake up` with
flags passed through to its masters."""

import json
import os
import re
import signal
import subprocess

import pytest

from conftest import LOCAL_BUFFER_BYTES, SEGMENT_BYTES, mooncake_bin, wait_for
from mooncake_rs.mooncake_config import MooncakeConfig, parse_size
from mooncake_rs.store import MooncakeDistributedStore

INVALID_PARAMS = -600


def test_seven_arguments_set_up_a_store_node_with_a_port_in_mooncakes_range(stores):
    # Why: the positional form is what vLLM and SGLang call.
    s = stores.open()
    host, port = s.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1" and 12300 <= int(port) <= 14300
    assert s.health_check() == 0
    assert s._segment_shm_path().startswith("/dev/shm/mooncake-")
    # A second setup keeps the first (0, as Mooncake).
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", SEGMENT_BYTES, 0, "tcp", "", stores.cluster.masters) == 0
    assert s.put("t10/k", b"v") == 0 and s.get("t10/k") == b"v"


def test_dict_form_and_a_given_port(stores, cluster):
    # Why: the dict form is Mooncake's other overload; host:port fixes the port.
    s = MooncakeDistributedStore()
    port = 14000 + os.getpid() % 250
    cfg = {
        "local_hostname": f"127.0.0.1:{port}",
        "metadata_server": "http://unused:8080/metadata",
        "global_segment_size": "32MB",
        "local_buffer_size": LOCAL_BUFFER_BYTES,
        "protocol": "tcp",
        "master_server_addr": cluster.masters,
    }
    assert s.setup(cfg) == 0
    stores.stores.append(s)
    cluster.shm_files.add(s._segment_shm_path())
    assert s.get_hostname() == f"127.0.0.1:{port}"
    assert s.put("t10/dict", b"x") == 0
    with pytest.raises(TypeError):
        MooncakeDistributedStore().setup({"metadata_server": "x"})  # local_hostname is required
    # A size of the right type that means nothing is a code, as upstream's.
    unusable = MooncakeDistributedStore()
    assert unusable.setup({**cfg, "global_segment_size": "50%"}) == INVALID_PARAMS
    assert unusable.health_check() == 1, "a refused setup leaves the store unset"


def test_environment_and_json_file_configure_like_mooncakes_loader(cluster, stores, tmp_path, monkeypatch):
    # Why: deployments configure Mooncake with MOONCAKE_* variables or a JSON file.
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.setenv("MOONCAKE_MASTER", cluster.masters)
    monkeypatch.setenv("MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "32MB")
    monkeypatch.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "4 MiB")
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "TCP")
    cfg = MooncakeConfig.load_from_env()
    assert (cfg.global_segment_size, cfg.local_buffer_size, cfg.protocol) == (32 << 20, 4 << 20, "tcp")
    s = MooncakeDistributedStore()
    assert cfg.setup(s) == 0
    stores.stores.append(s)
    cluster.shm_files.add(s._segment_shm_path())
    assert s.put("t10/env", b"e") == 0

    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                                "global_segment_size": 0, "local_buffer_size": "1mb",
                                "protocol": "tcp", "master_server_address": cluster.masters}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    cfg = MooncakeConfig.load_from_env()
    assert cfg.setup_args() == ("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", cluster.masters)
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH")
    monkeypatch.delenv("MOONCAKE_MASTER")
    with pytest.raises(ValueError):
        MooncakeConfig.load_from_env()
    assert parse_size("1.5g") == 3 << 29 and parse_size(4096) == 4096
    with pytest.raises(ValueError):
        parse_size("12 parsecs")


def test_bad_setups_return_codes_and_leave_the_store_unset(cluster):
    # Why: a misconfiguration must be an error code, never a crash.
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "", 0, 0, "tcp", "", "etcd://127.0.0.1:2379") == INVALID_PARAMS
    assert s.setup("127.0.0.1", "", 0, 0, "carrier-pigeon", "", cluster.masters) == INVALID_PARAMS
    assert s.setup("127.0.0.1:0", "", 0, 0, "tcp", "", cluster.masters) == INVALID_PARAMS
    assert s.setup("127.0.0.1", "", 100, 0, "tcp", "", cluster.masters) == INVALID_PARAMS
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "", -1, 0, "tcp", "", cluster.masters)
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE")  # the positional form takes 7 arguments
    assert s.health_check() == 1 and s.get_hostname() == ""


def test_writer_chunks_are_configured_by_the_environment(cluster, monkeypatch):
    # Why: an operator who wants every put to start with a PutStart (or
    # other chunk sizes) sets one variable; a bad value is an error code.
    for bad in ("lots", "1KiB", "1GiB"):
        monkeypatch.setenv("MOONCAKE_PUT_CHUNK_BYTES", bad)
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "", 0, 0, "tcp", "", cluster.masters) == INVALID_PARAMS, bad
    for ok in ("0", "8MiB"):
        monkeypatch.setenv("MOONCAKE_PUT_CHUNK_BYTES", ok)
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "", 0, 0, "tcp", "", cluster.masters) == 0, ok
        s.close()


def test_health_and_close(stores):
    # Why: close unmounts the segment; every call after it is refused.
    s = stores.open()
    assert s.put("t10/closing", b"x") == 0
    assert s.health_check() == 0
    assert s.close() == 0 and s.close() == 0
    assert s.health_check() == 1
    assert s.get("t10/closing") == b"" and s.put("t10/closing", b"y") == INVALID_PARAMS


def test_mooncake_up_passes_flags_to_its_masters(tmp_path, capfd):
    # Why: a local cluster with short TTLs is one command.
    up = subprocess.Popen(
        [mooncake_bin(), "up", "--stores=0", f"--dir={tmp_path / 'up'}",
         "--master-arg=--client_ttl=3", "--master-arg=--default_kv_lease_ttl=500"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        line = wait_for("`mooncake up` to print its masters", 60, up.stdout.readline)
        masters = re.match(r"masters: (\S+)", line).group(1)
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "", SEGMENT_BYTES, LOCAL_BUFFER_BYTES, "tcp", "", masters) == 0
        assert s.put("up/k", b"v") == 0 and s.get("up/k") == b"v"
        assert s.remove("up/k") == -706  # just read: its KV lease holds it
        wait_for("the 0.5 s KV lease to end", 5, lambda: s.remove("up/k") == 0, interval_s=0.1)
        # Why: vLLM resets the cache with remove_all(force=True) and never
        # looks at the answer. Without the admin token it is refused, and
        # says so; with the settings file `mooncake up` writes (the one
        # MOONCAKE_CONFIG_PATH names for the frameworks) it works.
        assert s.put("up/reset", b"v") == 0
        assert s.remove_all(True) == -601
        assert "MOONCAKE_ADMIN_TOKEN_FILE" in capfd.readouterr().err, "a refused reset names the fix"
        s.close()
        line = wait_for("the frameworks' settings file", 10,
                        lambda: next((l for l in iter(up.stdout.readline, "") if "MOONCAKE_CONFIG_PATH=" in l), None))
        config_path = re.search(r"MOONCAKE_CONFIG_PATH=(\S+)", line).group(1)
        with open(config_path) as f:
            conf = json.load(f)
        assert conf["master_server_address"] == masters
        os.environ["MOONCAKE_CONFIG_PATH"] = config_path
        try:
            framework = MooncakeDistributedStore()
            assert framework.setup(conf["local_hostname"], conf["metadata_server"], SEGMENT_BYTES,
                                   conf["local_buffer_size"], conf["protocol"], conf["device_name"],
                                   conf["master_server_address"]) == 0
        finally:
            del os.environ["MOONCAKE_CONFIG_PATH"]
        assert framework.put("up/reset", b"v") == 0
        assert framework.remove_all(True) >= 1
        assert framework.is_exist("up/reset") == 0
        framework.close()
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=20)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(timeout=5)


def test_code_written_for_mooncake_imports_us_after_install(monkeypatch):
    # Why: frameworks import mooncake.store themselves; compat.install() stands in.
    import sys

    from mooncake_rs import compat

    names = ("mooncake", "mooncake.store", "mooncake.mooncake_config", "mooncake.async_store", "mooncake.engine")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        compat.install()
        from mooncake.mooncake_config import MooncakeConfig as Upstreamish
        from mooncake.store import MooncakeDistributedStore as Store

        assert Store is MooncakeDistributedStore and Upstreamish is MooncakeConfig
        # The raw transfer engine is not ours: importing it works (LMCache's
        # MP mode imports it to register an optional channel), using it says so.
        from mooncake.engine import TransferEngine

        with pytest.raises(RuntimeError, match="not its raw transfer engine"):
            TransferEngine()
    finally:
        for name in names:
            sys.modules.pop(name, None)
