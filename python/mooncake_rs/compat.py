"""Run code written for upstream Mooncake without editing its imports.

``install()`` makes ``import mooncake.store``, ``import
mooncake.async_store`` and ``import mooncake.mooncake_config`` return
mooncake-rs's modules (and ``import mooncake.engine`` one whose
``TransferEngine`` says it is not provided: ``mooncake_rs.engine``), for frameworks
whose import line you cannot change (call it before they import Mooncake,
or from a ``.pth`` file, see docs/PYTHON.md). Where you can change the
line, prefer ``from mooncake_rs.store import MooncakeDistributedStore``.
"""

import sys
import types

import mooncake_rs.async_store
import mooncake_rs.engine
import mooncake_rs.mooncake_config
import mooncake_rs.store


def install() -> None:
    """Aliases ``mooncake``, ``mooncake.store``, ``mooncake.async_store``,
    ``mooncake.mooncake_config`` and ``mooncake.engine``."""
    if "mooncake.store" in sys.modules and sys.modules["mooncake.store"] is not mooncake_rs.store:
        raise RuntimeError("upstream mooncake.store is imported already; call install() before it is")
    package = types.ModuleType("mooncake", "mooncake-rs standing in for Mooncake (mooncake_rs.compat)")
    package.__path__ = []  # a package: submodules resolve through sys.modules
    package.store = mooncake_rs.store
    package.mooncake_config = mooncake_rs.mooncake_config
    package.async_store = mooncake_rs.async_store
    package.engine = mooncake_rs.engine
    sys.modules["mooncake"] = package
    sys.modules["mooncake.store"] = mooncake_rs.store
    sys.modules["mooncake.async_store"] = mooncake_rs.async_store
    sys.modules["mooncake.mooncake_config"] = mooncake_rs.mooncake_config
    sys.modules["mooncake.engine"] = mooncake_rs.engine
