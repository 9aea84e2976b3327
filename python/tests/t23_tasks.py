"""Upstream 0.3.14's task calls side by side with its wheel's documented and
observed behaviour (docs/PYTHON.md, "Copy, move and query tasks (0.3.14)"):
create_copy_task, create_move_task and query_task with upstream's
arguments, return shapes and codes, mirroring upstream's
scripts/test_copy_move_api.py (polling query_task every 0.1 s until SUCCESS
or FAILED); ExistOptions on is_exist/batch_is_exist; and every call before
setup and after close answering a code (upstream segfaults there).

The prefetch itself (a disk-only object back in memory) needs a disk tier,
which this cluster has not: cli/tests/t59_tasks.rs shows it on real store
nodes."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mooncake_rs.store import (
    ERROR_CODES,
    FAILED,
    PENDING,
    PROCESSING,
    REPLICA_COPY,
    REPLICA_MOVE,
    SUCCESS,
    ExistOptions,
    MooncakeDistributedStore,
    QueryTaskResponse,
    ReplicaStatus,
    ReplicateConfig,
    TaskStatus,
    TaskType,
)

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
TASK_NOT_FOUND = -1400
POLL_S = 0.1
TASK_TIMEOUT_S = 20


def query_task_until_complete(store, task_id):
    """Upstream's helper: raises unless query_task answers 0; polls until the
    task is SUCCESS or FAILED."""
    deadline = time.monotonic() + TASK_TIMEOUT_S
    while True:
        resp, err = store.query_task(task_id)
        if err != 0:
            raise RuntimeError(f"query_task({task_id}) answered {err}")
        if resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED):
            return resp
        assert time.monotonic() < deadline, f"task {task_id} still {resp.status} after {TASK_TIMEOUT_S} s"
        time.sleep(POLL_S)


def endpoints(store, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint for d in store.get_replica_desc(key))


def on(segment):
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    cfg.preferred_segment = segment
    return cfg


@pytest.fixture
def two(stores):
    """Two stores of this process, each contributing a segment; their
    segment names (get_hostname(), as upstream's test names them)."""
    a, b = stores.open(), stores.open()
    assert a.get_hostname() != b.get_hostname()
    return a, b, sorted([a.get_hostname(), b.get_hostname()])


def test_basic_copy_operation(two):
    """Upstream test_basic_copy_operation: after SUCCESS the replica endpoints
    are all segments; create_copy_task returns ((hi, lo), 0)."""
    a, b, segments = two
    assert a.put("t23/copy", b"copy me" * 1000, on(a.get_hostname())) == 0
    assert endpoints(a, "t23/copy") == [a.get_hostname()]
    task_id, err = a.create_copy_task("t23/copy", [b.get_hostname()])
    assert err == 0
    assert isinstance(task_id, tuple) and len(task_id) == 2 and all(isinstance(x, int) for x in task_id)
    resp = query_task_until_complete(a, task_id)
    assert resp.status == TaskStatus.SUCCESS and int(resp.status) == 3
    assert resp.message == "Task completed successfully"
    assert resp.id == task_id and resp.type == TaskType.REPLICA_COPY
    assert resp.created_at_ms_epoch > 1_600_000_000_000
    assert resp.last_updated_at_ms_epoch >= resp.created_at_ms_epoch
    assert isinstance(resp.assigned_client, tuple) and len(resp.assigned_client) == 2
    assert repr(resp).startswith(f"QueryTaskResponse(id={task_id[0]}-{task_id[1]}, type=0, status=3, ")
    assert endpoints(a, "t23/copy") == segments
    assert b.get("t23/copy") == b"copy me" * 1000


def test_basic_move_operation(two):
    """Upstream test_basic_move_operation: after SUCCESS exactly one endpoint,
    the target; get still returns the bytes."""
    a, b, _ = two
    value = bytes(range(256)) * 512
    assert a.put("t23/move", value, on(a.get_hostname())) == 0
    task_id, err = a.create_move_task("t23/move", a.get_hostname(), b.get_hostname())
    assert err == 0
    resp = query_task_until_complete(a, task_id)
    assert (resp.status, resp.type, resp.message) == (TaskStatus.SUCCESS, TaskType.REPLICA_MOVE, "Task completed successfully")
    assert endpoints(a, "t23/move") == [b.get_hostname()]
    assert a.get("t23/move") == value


def test_copy_and_move_of_a_missing_key(two):
    """Upstream test_copy_nonexistent_key / test_move_nonexistent_key: -704,
    with the id (0, 0); empty targets are -600, checked before existence."""
    a, b, _ = two
    assert a.create_copy_task("t23/missing", [b.get_hostname()]) == ((0, 0), OBJECT_NOT_FOUND)
    assert a.create_move_task("t23/missing", a.get_hostname(), b.get_hostname()) == ((0, 0), OBJECT_NOT_FOUND)
    assert a.create_copy_task("t23/missing", []) == ((0, 0), INVALID_PARAMS)


def test_copy_and_move_with_unknown_segments(two):
    """Upstream test_copy_with_unknown_segments / test_move_with_unknown_segments:
    an unknown target -600; an unknown source -600 (it holds no replica)."""
    a, b, _ = two
    assert a.put("t23/unknown", b"x", on(a.get_hostname())) == 0
    assert a.create_copy_task("t23/unknown", ["bogus:1"]) == ((0, 0), INVALID_PARAMS)
    assert a.create_copy_task("t23/unknown", [b.get_hostname(), "bogus:1"]) == ((0, 0), INVALID_PARAMS)
    assert a.create_move_task("t23/unknown", "bogus:1", b.get_hostname()) == ((0, 0), INVALID_PARAMS)
    assert a.create_move_task("t23/unknown", a.get_hostname(), "bogus:1") == ((0, 0), INVALID_PARAMS)
    # A segment that exists but holds no replica is no source either.
    assert a.create_move_task("t23/unknown", b.get_hostname(), a.get_hostname()) == ((0, 0), INVALID_PARAMS)
    assert endpoints(a, "t23/unknown") == [a.get_hostname()], "a refused task changes nothing"


def test_copy_to_existing_segments(two):
    """Upstream test_copy_to_exist_segments: targets holding a replica are
    skipped (duplicates too), the task still SUCCESS, the replicas unchanged."""
    a, b, segments = two
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    assert a.put("t23/both", b"twice", cfg) == 0
    assert endpoints(a, "t23/both") == segments
    task_id, err = a.create_copy_task("t23/both", segments + [a.get_hostname()])
    assert err == 0
    assert query_task_until_complete(a, task_id).status == TaskStatus.SUCCESS
    assert endpoints(a, "t23/both") == segments


def test_move_to_same_segment(two):
    """Upstream test_move_to_same_segment: -600, the object untouched."""
    a, _, _ = two
    assert a.put("t23/same", b"stay", on(a.get_hostname())) == 0
    assert a.create_move_task("t23/same", a.get_hostname(), a.get_hostname()) == ((0, 0), INVALID_PARAMS)
    assert endpoints(a, "t23/same") == [a.get_hostname()]


def test_concurrent_copy_and_move_operations(two):
    """Upstream test_concurrent_copy_operations / test_concurrent_move_operations:
    tasks made from several threads at once all succeed."""
    a, b, segments = two
    n = 8
    for i in range(n):
        assert a.put(f"t23/many/{i}", f"value {i}".encode() * 100, on(a.get_hostname())) == 0

    def task(i):
        key = f"t23/many/{i}"
        if i % 2 == 0:
            return key, a.create_copy_task(key, [b.get_hostname()])
        return key, a.create_move_task(key, a.get_hostname(), b.get_hostname())

    with ThreadPoolExecutor(max_workers=4) as pool:
        made = list(pool.map(task, range(n)))
    for i, (key, (task_id, err)) in enumerate(made):
        assert err == 0, key
        assert query_task_until_complete(a, task_id).status == TaskStatus.SUCCESS, key
        assert endpoints(a, key) == (segments if i % 2 == 0 else [b.get_hostname()]), key
        assert b.get(key) == f"value {i}".encode() * 100


def test_query_task_of_an_unknown_id_and_its_argument_types(two):
    """Upstream query_task: (None, -1400) for an unknown id; a 2-element list
    works; an int is a TypeError (pybind's argument check)."""
    a, _, _ = two
    assert a.query_task((1, 2)) == (None, TASK_NOT_FOUND)
    assert a.query_task([1, 2]) == (None, TASK_NOT_FOUND)
    assert a.query_task((0, 0)) == (None, TASK_NOT_FOUND)
    with pytest.raises(TypeError):
        a.query_task(5)
    assert ERROR_CODES["TASK_NOT_FOUND"] == -1400
    assert ERROR_CODES["TASK_PENDING_LIMIT_EXCEEDED"] == -1401
    assert ERROR_CODES["UNAVAILABLE_IN_CURRENT_STATUS"] == -1010


def test_task_enums_and_the_module_level_names():
    """Upstream's numbers (FAILED=2, SUCCESS=3) and its module-level names,
    which are the task enums' (ReplicaStatus stays reachable by its class)."""
    assert [int(s) for s in (TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.FAILED, TaskStatus.SUCCESS)] == [0, 1, 2, 3]
    assert (int(TaskType.REPLICA_COPY), int(TaskType.REPLICA_MOVE)) == (0, 1)
    assert (PENDING, PROCESSING, FAILED, SUCCESS) == (TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.FAILED, TaskStatus.SUCCESS)
    assert (REPLICA_COPY, REPLICA_MOVE) == (TaskType.REPLICA_COPY, TaskType.REPLICA_MOVE)
    assert int(ReplicaStatus.PROCESSING) == 2 and int(ReplicaStatus.FAILED) == 5
    empty = QueryTaskResponse()
    assert (empty.id, empty.status, empty.message) == ((0, 0), TaskStatus.PENDING, "")
    with pytest.raises(AttributeError):
        empty.message = "read-only"


def test_exist_options_leave_the_answers_unchanged(stores, cluster):
    """Upstream ExistOptions: no-argument constructor, read/write
    prefetch_to_memory (default False), str 'ExistOptions: { prefetch_to_memory: 0 }';
    is_exist/batch_is_exist answer as without it (1, 0), keyword form too;
    enable_ssd_prefetch is a dict-setup key."""
    opts = ExistOptions()
    assert opts.prefetch_to_memory is False
    assert str(opts) == "ExistOptions: { prefetch_to_memory: 0 }"
    opts.prefetch_to_memory = True
    assert str(opts) == "ExistOptions: { prefetch_to_memory: 1 }"
    s = MooncakeDistributedStore()
    cfg = {
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": 32 << 20,
        "local_buffer_size": 4 << 20,
        "protocol": "tcp",
        "master_server_addr": cluster.masters,
        "enable_ssd_prefetch": "true",
    }
    assert s.setup(cfg) == 0
    stores.stores.append(s)
    cluster.shm_files.add(s._segment_shm_path())
    assert s.put("t23/exists", b"here") == 0
    for options in (opts, ExistOptions()):
        assert s.is_exist("t23/exists", options) == 1
        assert s.is_exist(key="t23/missing", options=options) == 0
        assert s.batch_is_exist(["t23/exists", "t23/missing"], options) == [1, 0]
        assert s.batch_is_exist(keys=["t23/exists"], options=options) == [1]
    assert s.is_exist("t23/exists") == 1


def test_every_task_call_answers_a_code_before_setup_and_after_close(stores):
    """Upstream segfaults (exit 139) on these calls before setup and after
    close; ours answer INVALID_PARAMS (-1 for is_exist, as its other errors)."""
    fresh = MooncakeDistributedStore()
    closed = stores.open()
    closed.close()
    for s in (fresh, closed):
        assert s.create_copy_task("k", ["127.0.0.1:1"]) == ((0, 0), INVALID_PARAMS)
        assert s.create_move_task("k", "a:1", "b:1") == ((0, 0), INVALID_PARAMS)
        assert s.query_task((1, 2)) == (None, INVALID_PARAMS)
        opts = ExistOptions()
        opts.prefetch_to_memory = True
        assert s.is_exist("k", opts) == -1
        assert s.batch_is_exist(["k", "j"], opts) == [-1, -1]
