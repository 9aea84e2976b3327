"""Configuration from the environment or a JSON file, as Mooncake's loader.

``MooncakeConfig.load_from_env()`` reads the file named by
``MOONCAKE_CONFIG_PATH`` if set, else these variables:

==============================  ===========================  ================
variable                        meaning                      default
==============================  ===========================  ================
``MOONCAKE_MASTER``             masters, ``host:port,...``   (required)
``MOONCAKE_LOCAL_HOSTNAME``     this host (``host[:port]``)  ``localhost``
``MOONCAKE_GLOBAL_SEGMENT_SIZE`` memory contributed          3.125 GiB
``MOONCAKE_LOCAL_BUFFER_SIZE``  local buffer pool            1 GiB
``MOONCAKE_PROTOCOL``           ``tcp`` (or ``rdma``, ...)   ``tcp``
``MOONCAKE_DEVICE``             RDMA devices (unused)        ``""``
``MOONCAKE_TE_META_DATA_SERVER`` metadata server (unused)    ``P2PHANDSHAKE``
==============================  ===========================  ================

Sizes are integers or strings with a unit (``"4GB"``, ``"512 MiB"``,
``"1.5g"``; powers of 1024). The JSON file has the same fields:
``local_hostname``, ``metadata_server``, ``global_segment_size``,
``local_buffer_size``, ``protocol``, ``device_name``,
``master_server_address``, and (mooncake-rs only) ``tls_cert``,
``tls_key``, ``tls_ca``: PEM files that turn on mutual TLS, all three or
none. Without them in the file, ``setup`` reads ``MOONCAKE_TLS_CERT``,
``MOONCAKE_TLS_KEY`` and ``MOONCAKE_TLS_CA`` itself.
"""

import json
import os
import re
from dataclasses import dataclass
from typing import Optional

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB, Mooncake's default
DEFAULT_LOCAL_BUFFER_SIZE = 1 << 30
DEFAULT_METADATA_SERVER = "P2PHANDSHAKE"

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(value) -> int:
    """Bytes of ``value``: an int, or a string such as ``"4GB"`` or ``"512 MiB"``."""
    if isinstance(value, bool):
        raise ValueError(f"invalid size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid size: {value} is negative")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"invalid size: {value!r} (examples: 4096, 64KB, 4GiB)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


@dataclass
class MooncakeConfig:
    """What ``MooncakeDistributedStore.setup`` takes, by Mooncake's names."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: str
    master_server_address: str
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_ca: Optional[str] = None

    def __post_init__(self):
        self.global_segment_size = parse_size(self.global_segment_size)
        self.local_buffer_size = parse_size(self.local_buffer_size)
        self.protocol = (self.protocol or "tcp").lower()
        for name in ("local_hostname", "master_server_address"):
            if not getattr(self, name):
                raise ValueError(f"mooncake config: {name} is required")

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """The configuration in the JSON file ``file_path``."""
        with open(file_path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict):
            raise ValueError(f"{file_path}: expected a JSON object")
        return MooncakeConfig(
            local_hostname=doc.get("local_hostname", ""),
            metadata_server=doc.get("metadata_server", DEFAULT_METADATA_SERVER),
            global_segment_size=doc.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE),
            local_buffer_size=doc.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE),
            protocol=doc.get("protocol", "tcp"),
            device_name=doc.get("device_name", ""),
            master_server_address=doc.get("master_server_address", doc.get("master_server_addr", "")),
            tls_cert=doc.get("tls_cert"),
            tls_key=doc.get("tls_key"),
            tls_ca=doc.get("tls_ca"),
        )

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """The file named by ``MOONCAKE_CONFIG_PATH``, else the ``MOONCAKE_*`` variables."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path:
            return MooncakeConfig.from_file(path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("set MOONCAKE_CONFIG_PATH (a JSON file) or MOONCAKE_MASTER (host:port,...)")
        return MooncakeConfig(
            local_hostname=os.getenv("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=os.getenv("MOONCAKE_TE_META_DATA_SERVER", DEFAULT_METADATA_SERVER),
            global_segment_size=os.getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE),
            local_buffer_size=os.getenv("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE),
            protocol=os.getenv("MOONCAKE_PROTOCOL", "tcp"),
            device_name=os.getenv("MOONCAKE_DEVICE", ""),
            master_server_address=os.getenv("MOONCAKE_MASTER", ""),
        )

    def setup_args(self) -> tuple:
        """The seven positional arguments of ``MooncakeDistributedStore.setup``."""
        return (
            self.local_hostname,
            self.metadata_server,
            self.global_segment_size,
            self.local_buffer_size,
            self.protocol,
            self.device_name,
            self.master_server_address,
        )

    def setup_dict(self) -> dict:
        """The dict form of ``MooncakeDistributedStore.setup``: the same
        arguments, and the TLS files when any is set."""
        names = ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
                 "protocol", "rdma_devices", "master_server_addr")
        doc = dict(zip(names, self.setup_args()))
        for key in ("tls_cert", "tls_key", "tls_ca"):
            if getattr(self, key):
                doc[key] = getattr(self, key)
        return doc

    def setup(self, store) -> int:
        """``store.setup(...)`` with this configuration; its return code."""
        if self.tls_cert or self.tls_key or self.tls_ca:
            return store.setup(self.setup_dict())
        return store.setup(*self.setup_args())
