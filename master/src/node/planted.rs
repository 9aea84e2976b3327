//! The planted bugs of a master: the `--dev-unsafe-*` flags the chaos
//! harness starts masters with to prove each checker catches its bug
//! (docs/JEPSEN.md, "Planted bugs"). They exist only in a build with the
//! `planted-bugs` cargo feature (`cargo build --features
//! mooncake-cli/planted-bugs`; every test build has it through testkit, and
//! the chaos CI build turns it on). A default build does not know the flags, and every accessor
//! below is a constant `false` there: nothing can turn a bug on.

/// Every planted bug of one master, off unless its flag is given (and the
/// flag exists only with the `planted-bugs` feature).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PlantedBugs {
    /// DEVELOPMENT ONLY — BREAKS LINEARIZABILITY. Serve reads from any master's
    /// local state without confirming leadership. Exists so the chaos harness
    /// can prove it catches stale reads; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-stale-reads", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    stale_reads: bool,
    /// DEVELOPMENT ONLY — BREAKS THE EVENT FEED. `Watch` streams leave out
    /// the first event of every 7th revision. Exists so the chaos harness
    /// can prove its events checker catches a gap; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-skip-events", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    skip_events: bool,
    /// DEVELOPMENT ONLY — BREAKS TENANT ISOLATION. Every call acts in the
    /// default tenant, whatever tenant it names. Exists so the chaos
    /// harness can prove its tenant probe catches tenants crossing; never
    /// use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-ignore-tenants", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    ignore_tenants: bool,
    /// DEVELOPMENT ONLY — LOSES ACKNOWLEDGED WRITES ON POWER LOSS. Acknowledge
    /// log writes without fsync. Exists so the chaos harness can prove it
    /// catches lost writes; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-no-fsync", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    no_fsync: bool,
    /// DEVELOPMENT ONLY — BREAKS KV LEASES. Removals and evictions check
    /// leases before they propose but do not fence readers, so a read
    /// answered during a removal's commit gets an object that is then freed.
    /// Exists so the stress test and chaos harness can prove they catch it;
    /// never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-unfenced-removals", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    unfenced_removals: bool,
    /// DEVELOPMENT ONLY — CORRUPTS OBJECTS. A new leader returns the arenas
    /// of earlier terms at once instead of after the release timeout, and
    /// never takes them back from their store nodes (its fences go on
    /// admitting writes under them), so a range a deposed leader handed to
    /// a stalled writer can be given to another writer while the first
    /// still writes, and both writes land. Exists so the chaos
    /// harness can prove it catches that; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-arena-reuse", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    arena_reuse: bool,
    /// DEVELOPMENT ONLY — CORRUPTS OBJECTS. A writer chunk's space is
    /// reclaimed the moment it is granted (handed out again to the next
    /// put or chunk in its arena) while its writer still places objects in
    /// it. Exists so the chaos harness can prove it catches a writer arena
    /// reclaimed too early; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-chunk-reuse", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    chunk_reuse: bool,
    /// DEVELOPMENT ONLY — REFUSES PUTS. The ranges of a revoked put and of a
    /// returned writer chunk hold their arena for 30 s (the quarantine of
    /// releases before stop 43) instead of freeing it at once, so a
    /// churning cache's freed bytes sit in arenas nobody can return and
    /// puts are refused while evictable bytes exist. Exists so the chaos
    /// harness can prove its availability checker catches that; never use
    /// it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-hold-freed-ranges", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    hold_freed_ranges: bool,
    /// DEVELOPMENT ONLY — LOSES OBJECTS. A leader that was paused or stalled
    /// expires the clients it could not hear meanwhile, at once, instead of
    /// restarting their TTLs. Exists so the chaos harness can prove it
    /// catches that; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-expire-after-stall", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    expire_after_stall: bool,
    /// DEVELOPMENT ONLY — the master whose id this is reports altered state
    /// hashes, as one whose state diverged would. Exists so a test can prove
    /// the state audit ends such a master; never use it in production.
    #[cfg_attr(feature = "planted-bugs", arg(long = "dev-unsafe-diverge-node", hide_short_help = true))]
    #[cfg_attr(not(feature = "planted-bugs"), arg(skip))]
    diverge_node: Option<u64>,
}

/// True in a build with the `planted-bugs` feature: its `--dev-unsafe-*`
/// flags exist (`mooncake status` marks such a master).
pub const BUILT_IN: bool = cfg!(feature = "planted-bugs");

impl PlantedBugs {
    pub fn stale_reads(&self) -> bool {
        BUILT_IN && self.stale_reads
    }
    pub fn skip_events(&self) -> bool {
        BUILT_IN && self.skip_events
    }
    pub fn ignore_tenants(&self) -> bool {
        BUILT_IN && self.ignore_tenants
    }
    pub fn no_fsync(&self) -> bool {
        BUILT_IN && self.no_fsync
    }
    pub fn unfenced_removals(&self) -> bool {
        BUILT_IN && self.unfenced_removals
    }
    pub fn arena_reuse(&self) -> bool {
        BUILT_IN && self.arena_reuse
    }
    pub fn chunk_reuse(&self) -> bool {
        BUILT_IN && self.chunk_reuse
    }
    pub fn hold_freed_ranges(&self) -> bool {
        BUILT_IN && self.hold_freed_ranges
    }
    pub fn expire_after_stall(&self) -> bool {
        BUILT_IN && self.expire_after_stall
    }
    /// Whether master `id` is the one that reports altered state hashes.
    pub fn diverges(&self, id: u64) -> bool {
        BUILT_IN && self.diverge_node == Some(id)
    }

    /// The flags given, by name (without `--dev-unsafe-`), for the start's
    /// warning and `mooncake status`.
    pub fn on(&self, id: u64) -> Vec<&'static str> {
        [
            ("stale-reads", self.stale_reads()),
            ("skip-events", self.skip_events()),
            ("ignore-tenants", self.ignore_tenants()),
            ("no-fsync", self.no_fsync()),
            ("unfenced-removals", self.unfenced_removals()),
            ("arena-reuse", self.arena_reuse()),
            ("chunk-reuse", self.chunk_reuse()),
            ("hold-freed-ranges", self.hold_freed_ranges()),
            ("expire-after-stall", self.expire_after_stall()),
            ("diverge-node", self.diverges(id)),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use crate::MasterConfig;

    fn dev_unsafe_flags() -> Vec<String> {
        MasterConfig::command()
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| l.starts_with("dev-unsafe"))
            .map(str::to_string)
            .collect()
    }

    /// The planted-bugs build (every test build: testkit turns the feature
    /// on) knows each flag, and each turns on its bug. That a default build
    /// knows none is checked by CI on the release binary's `--help`.
    #[test]
    fn the_planted_bugs_build_knows_each_flag() {
        assert_eq!(dev_unsafe_flags().len(), 10, "{:?}", dev_unsafe_flags());
        let cfg = <MasterConfig as clap::Parser>::try_parse_from([
            "mooncake-master",
            "--id=2",
            "--data-dir=/nonexistent",
            "--dev-unsafe-stale-reads",
            "--dev-unsafe-diverge-node=2",
        ])
        .expect("parses");
        assert_eq!(cfg.planted.on(2), vec!["stale-reads", "diverge-node"]);
        assert_eq!(cfg.planted.on(3), vec!["stale-reads"]);
    }
}
