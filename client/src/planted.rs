//! The planted bug of a store node: the `--dev-unsafe-*` flag the chaos
//! harness starts store nodes with to prove its checker catches a disk
//! tier that acknowledges what it did not store (docs/JEPSEN.md, "Planted
//! bugs"). The flag exists only in a build with the `planted-bugs` cargo
//! feature; in a default build the accessor is a constant `false`.

/// The planted bugs of one store node (`mooncake store` flags).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct StorePlantedBugs {
    /// DEVELOPMENT ONLY — LOSES OBJECTS. Report the copies the masters ask
    /// of this node (offload to its disk, promotion to its memory) as made
    /// without writing them. Exists so the chaos harness can prove it
    /// catches that (`jepsen/tests/t93_catches_unwritten_copies.rs`);
    /// never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-unwritten-copies", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    unwritten_copies: bool,
}

/// True in a build with the `planted-bugs` feature.
pub const BUILT_IN: bool = cfg!(feature = "planted-bugs");

impl StorePlantedBugs {
    /// Copies are reported made, unwritten.
    pub fn unwritten_copies(&self) -> bool {
        BUILT_IN && self.unwritten_copies
    }
}
