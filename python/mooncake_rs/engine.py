"""``mooncake.engine`` under ``mooncake_rs.compat``: what mooncake-rs has
of upstream's raw transfer-engine module, which is nothing but its name.

mooncake-rs provides Mooncake's store API (``mooncake.store``), not its raw
transfer engine. Frameworks import ``mooncake.engine`` at load time to
register optional transfer channels (LMCache's multi-process mode does, and
stops if the import fails for any reason but a missing ``mooncake``), so the
import works, and making a ``TransferEngine`` raises with what to use
instead.
"""


class TransferEngine:
    """Upstream's raw transfer engine: not provided by mooncake-rs."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "mooncake-rs provides Mooncake's store (mooncake.store), not its raw transfer engine "
            "(mooncake.engine.TransferEngine): use the framework's Mooncake store connector (for LMCache's "
            "multi-process mode, the L2 adapter mooncake_rs.lmcache), or upstream's wheel for a transfer-engine "
            "channel"
        )
