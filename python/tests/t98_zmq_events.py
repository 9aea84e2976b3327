"""`mooncake events --zmq`: upstream Mooncake's KV-event feed (a ZMQ PUB
socket, three frames, MessagePack in upstream's field order) published from
the masters' watch, read here by a real ZMQ subscriber (pyzmq) and decoded
as upstream's subscribers decode it (docs/EVENTS.md, "The ZMQ feed")."""

import signal
import subprocess
import time

import msgpack
import pytest
import zmq

from conftest import free_port, wait_for


@pytest.fixture
def feed(cluster):
    """A bridge of keys under t98/, and a subscriber connected to it."""
    port = free_port()
    proc = subprocess.Popen(
        [cluster.bin, "events", "--masters", cluster.masters, "--zmq", f"tcp://127.0.0.1:{port}",
         "--backend-id", "t98-backend", "--prefix", "t98/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    try:
        yield proc, sub
    finally:
        sub.close(linger=0)
        ctx.term()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=10)


def receive(sub, timeout_s=5):
    """One message as (frames, sequence, [ts, events, dp_rank]); None if none came."""
    if not sub.poll(int(timeout_s * 1000)):
        return None
    frames = sub.recv_multipart()
    return frames, int.from_bytes(frames[1], "big"), msgpack.unpackb(frames[2], raw=False)


def test_a_subscriber_decodes_upstreams_format_in_order(feed, client):
    proc, sub = feed
    # A SUB socket misses what is published before its subscription
    # reaches the publisher: put probes until one arrives.
    probes = iter(range(1000))

    def probe_arrived():
        assert proc.poll() is None, proc.stderr.read()
        client.put(f"t98/probe-{next(probes)}", b"p")
        return receive(sub, 0.3)

    wait_for("the subscription to reach the bridge", 20, probe_arrived)
    while receive(sub, 0.3) is not None:  # the probes' other messages
        pass
    assert client.put("t98/a", b"0123456789") == 0
    wait_for("t98/a to be removable", 5, lambda: client.remove("t98/a") == 0, interval_s=0.1)
    stored, removed = receive(sub), receive(sub)
    assert stored is not None and removed is not None
    (frames, seq1, (ts, events, dp_rank)), (_, seq2, (_, events2, _)) = stored, removed
    assert len(frames) == 3 and frames[0] == b"", "topic, sequence, payload"
    assert len(frames[1]) == 8 and seq1 < seq2, "a rising 8-byte big-endian sequence (the revision)"
    assert abs(ts - time.time() * 1000) < 60_000 and dp_rank == 0
    [e] = events
    assert list(e)[:12] == [
        "event_id", "timestamp", "event_type", "type", "model_name", "block_size", "additional_salt",
        "lora_name", "tenant_id", "backend_id", "medium", "dp_rank",
    ], "upstream's field order"
    assert (e["event_type"], e["type"], e["medium"], e["object_key"]) == ("stored", "BlockStored", "cpu", "t98/a")
    assert (e["backend_id"], e["tenant_id"], e["seq_hashes"], e["token_ids"]) == ("t98-backend", "default", [], None)
    [r] = events2
    assert (r["event_type"], r["type"], r["medium"], r["object_key"]) == ("removed", "BlockRemoved", "cpu", "t98/a")
    assert r["event_id"] == e["event_id"] + 1
    assert "parent_hash" not in r
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0
    assert "resume with --from-revision" in proc.stderr.read()
