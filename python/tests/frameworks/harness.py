"""The frameworks tier's harness (its tests `from harness import *`, which
brings its fixtures): the Mooncake connector code of SGLang (and, as they
land, LMCache and vLLM), unmodified, against mooncake-rs through
`mooncake_rs.compat.install()`. It runs in a venv of its own, with torch
and the pinned frameworks (`venv.sh`), and only when asked:

    venv=$(python/tests/frameworks/venv.sh target/python-wheels/mooncake_rs-*.whl)
    MOONCAKE_FRAMEWORKS=1 MOONCAKE_BIN=target/release/mooncake "$venv/bin/pytest" -q python/tests/frameworks

The cluster is the parent conftest's (3 masters on loopback). Each
framework's connector makes its own store (it contributes a segment, as in
a real deployment); the /dev/shm files those leave are removed when the
session ends. Each framework's file runs in a pytest process of its own, as
each framework runs in its own process in production (`.ci/run`). What a framework needs that this machine lacks is named where it is
stood in for (docs/PYTHON.md, "Tested with").
"""

import json
import logging
import os
from pathlib import Path

import pytest

# Before any framework imports `mooncake.store`.
import mooncake_rs.compat

mooncake_rs.compat.install()

from conftest import Cluster, free_port, wait_for  # noqa: E402  (the parent conftest)

MiB = 1 << 20
SHM = Path("/dev/shm")


def shm_files():
    return set(SHM.glob("mooncake-*"))


@pytest.fixture(scope="session", autouse=True)
def remove_new_shm_files():
    """Connector-made stores are not closed by the frameworks' tests and
    other tests' puts may land on their segments: their /dev/shm files are
    removed when the session ends."""
    before = shm_files()
    yield
    for path in shm_files() - before:
        path.unlink(missing_ok=True)


@pytest.fixture
def fresh_cluster():
    """A cluster of this test alone (for tests that kill its masters)."""
    c = Cluster()
    yield c
    c.stop()


class ErrorLogs(logging.Handler):
    """Records what a framework logged at ERROR or above."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


@pytest.fixture
def framework_errors():
    """The ERROR lines the frameworks log during the test: an error that
    reached the framework shows here even where its API returns a bool."""
    handler = ErrorLogs()
    # The root logger, and the frameworks' own (they do not all propagate).
    loggers = [logging.getLogger(name) for name in ("", "sglang", "lmcache", "vllm")]
    for log in loggers:
        log.addHandler(handler)
    yield handler.records
    for log in loggers:
        log.removeHandler(handler)


def write_json(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


__all__ = [
    "MiB", "free_port", "wait_for", "write_json", "remove_new_shm_files", "fresh_cluster", "framework_errors",
]
