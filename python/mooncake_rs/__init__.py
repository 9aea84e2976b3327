"""mooncake-rs: a drop-in for Mooncake's Python store client.

Switch by changing one import line::

    from mooncake.store import MooncakeDistributedStore      # upstream Mooncake
    from mooncake_rs.store import MooncakeDistributedStore   # mooncake-rs

See docs/PYTHON.md in the mooncake-rs repository for what differs.
"""

from mooncake_rs._native import __version__

__all__ = ["__version__"]
