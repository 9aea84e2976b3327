//! Test support, behind the `testing` feature (and in this crate's own unit
//! tests): builders of the values commands carry, so that tests, examples
//! and benches declare a segment in one line instead of copying the struct;
//! the credential each test client proves itself with; and the random
//! command generator behind the determinism and invariant tests, which
//! emits every [`Command`] variant ([`command_variant`]).
//!
//! ```
//! use mooncake_raft_store::Tier;
//! use mooncake_raft_store::testing::{SegmentSpecExt, segment};
//!
//! let disk = segment(9, 1 << 20, "host-a").ssd();
//! assert_eq!((disk.endpoint.as_str(), disk.tier), ("host-a:7000", Tier::Ssd));
//! let shared = segment(1, 1 << 20, "host-a").shm("/dev/shm/seg-a");
//! assert_eq!(shared.shm_path, "/dev/shm/seg-a");
//! ```
//!
//! Never used by a binary: nothing here is part of the replicated formats.

use mooncake_segment::{ClientId, Range, SegmentId};

use crate::command::{
    ArenaId, Command, CredentialHash, NewObject, ObjectVersion, Pin, PlacedReplica, RemoveReason, Request, Response,
    SegmentSpec, Tier, VersionedKey,
};
use crate::state::{MetaState, ObjectMeta};

/// A memory segment `id` of `size_bytes` on `host`: endpoint
/// `"{host}:7000"`, zone `"zone-1"`, tier [`Tier::Dram`], no shared-memory
/// file. Change a field with [`SegmentSpecExt`].
pub fn segment(id: u64, size_bytes: u64, host: &str) -> SegmentSpec {
    SegmentSpec {
        id: SegmentId(id),
        size_bytes,
        endpoint: format!("{host}:7000"),
        host_id: host.to_string(),
        zone: "zone-1".to_string(),
        tier: Tier::Dram,
        shm_path: String::new(),
    }
}

/// Builder steps on a [`SegmentSpec`] made by [`segment`]: each sets one
/// field and returns the spec.
pub trait SegmentSpecExt {
    /// On a disk ([`Tier::Ssd`]).
    fn ssd(self) -> SegmentSpec;
    /// On `tier`.
    fn tier(self, tier: Tier) -> SegmentSpec;
    /// Backed by the shared-memory file `path` on its host.
    fn shm(self, path: &str) -> SegmentSpec;
    /// Served from the transfer endpoint `endpoint` ("host:port").
    fn endpoint(self, endpoint: impl Into<String>) -> SegmentSpec;
    /// In zone `zone` ("" for none).
    fn zone(self, zone: impl Into<String>) -> SegmentSpec;
}

impl SegmentSpecExt for SegmentSpec {
    fn ssd(self) -> SegmentSpec {
        self.tier(Tier::Ssd)
    }
    fn tier(self, tier: Tier) -> SegmentSpec {
        SegmentSpec { tier, ..self }
    }
    fn shm(self, path: &str) -> SegmentSpec {
        SegmentSpec { shm_path: path.to_string(), ..self }
    }
    fn endpoint(self, endpoint: impl Into<String>) -> SegmentSpec {
        SegmentSpec { endpoint: endpoint.into(), ..self }
    }
    fn zone(self, zone: impl Into<String>) -> SegmentSpec {
        SegmentSpec { zone: zone.into(), ..self }
    }
}

/// The credential hash test client `client` registers and proves itself
/// with (distinct per client).
pub fn credential_of(client: ClientId) -> CredentialHash {
    let mut bytes = [0x5a; 32];
    bytes[..8].copy_from_slice(&client.0.to_le_bytes());
    CredentialHash(bytes)
}

/// `MountSegment` of `spec` by `client`, proving it with its credential.
pub fn mount_cmd(client: ClientId, spec: SegmentSpec) -> Command {
    Command::MountSegment { client, credential: credential_of(client), segment: spec }
}

/// `UnmountSegment` of `segment` by `client`, proving it with its credential.
pub fn unmount_cmd(client: ClientId, segment: SegmentId) -> Command {
    Command::UnmountSegment { client, credential: credential_of(client), segment }
}

/// `RemountSegments` of `segments` by `client`, proving it with its credential.
pub fn remount_cmd(client: ClientId, segments: Vec<SegmentSpec>) -> Command {
    Command::RemountSegments { client, credential: credential_of(client), segments }
}

/// Applies `cmd` one millisecond of state time after the last command.
pub fn apply_next(state: &mut MetaState, cmd: Command) -> Response {
    let ts_ms = state.now_ms() + 1;
    state.apply(&Request { ts_ms, cmd })
}

/// `key` put the way the master puts it: on each of up to `replicas`
/// attached memory segments with room (the emptiest first, ties by id) an
/// arena of the object's aligned size, one `PutCommit` (checksum
/// `0xC0FFEE`, pinned `pin`; an upsert with `upsert`), and the arenas
/// returned. Panics unless every step applies.
pub fn put_object(
    state: &mut MetaState,
    client: ClientId,
    key: &str,
    size: u64,
    replicas: u32,
    pin: Pin,
    upsert: bool,
) -> ObjectVersion {
    let len = Tier::Dram.range_len(size).unwrap_or(size);
    let mut room: Vec<(u64, SegmentId)> =
        state.attached(Tier::Dram).filter(|g| g.free_bytes() >= len).map(|g| (g.free_bytes(), g.spec.id)).collect();
    room.sort_by_key(|(free, id)| (std::cmp::Reverse(*free), *id));
    assert!(!room.is_empty(), "no memory segment has room for {key:?} ({size} bytes)");
    let mut placed = Vec::new();
    for (_, segment) in room.into_iter().take(replicas as usize) {
        let grant = Command::ArenaGrant { segment, len_bytes: len, unit_bytes: len, term: 1 };
        match apply_next(state, grant) {
            Response::ArenaGranted(a) => {
                placed.push(PlacedReplica { segment, arena: a.id, range: Range::new(a.extents[0].offset, len) })
            }
            other => panic!("no arena of {len} bytes on {segment} for {key:?}: {other:?}"),
        }
    }
    let arenas: Vec<ArenaId> = placed.iter().map(|r| r.arena).collect();
    let new =
        NewObject { client, key: key.to_string(), size_bytes: size, checksum: 0xC0FFEE, pin, replicas: placed, upsert };
    let version = match apply_next(state, Command::PutCommit(new)) {
        Response::Committed { version } => version,
        other => panic!("{key:?} not committed: {other:?}"),
    };
    let returned = apply_next(state, Command::ArenaReturn { arenas: arenas.clone() });
    assert_eq!(returned, Response::Removed { count: arenas.len() as u64 }, "the arenas of {key:?} returned");
    version
}

/// How many variants [`Command`] has: [`command_variant`] numbers them.
pub const COMMAND_VARIANTS: usize = 26;

/// The position of `cmd`'s variant in [`Command`] (its first encoded
/// byte). The match is exhaustive: a new variant does not compile here
/// until it is numbered, and [`random_command`] is then asked to emit it
/// (`tests/t20_determinism.rs`).
pub fn command_variant(cmd: &Command) -> usize {
    match cmd {
        Command::MountSegment { .. } => 0,
        Command::UnmountSegment { .. } => 1,
        Command::RemountSegments { .. } => 2,
        Command::RemoveObjects { .. } => 3,
        Command::ExpireClient { .. } => 4,
        Command::Batch(_) => 5,
        Command::Once { .. } => 6,
        Command::Noop => 7,
        Command::RemoveVersion { .. } => 8,
        Command::ArenaGrant { .. } => 9,
        Command::ArenaTrim { .. } => 10,
        Command::ArenaReturn { .. } => 11,
        Command::PutCommit(_) => 12,
        Command::ReleaseRetired { .. } => 13,
        Command::AddReplica { .. } => 14,
        Command::DropTierReplicas { .. } => 15,
        Command::ExpireClientKeepDisk { .. } => 16,
        Command::DropDetached { .. } => 17,
        Command::DropCorrupt { .. } => 18,
        Command::ArenaCut { .. } => 19,
        Command::SetTenantQuota { .. } => 20,
        Command::PutCommitInQuota(_) => 21,
        Command::MountTenantSegment { .. } => 22,
        Command::RemountTenantSegments { .. } => 23,
        Command::ReattachSegments { .. } => 24,
        Command::DropReplica { .. } => 25,
    }
}

/// splitmix64: a tiny deterministic PRNG, so a failing run replays exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// In `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() { None } else { Some(&items[self.below(items.len() as u64) as usize]) }
    }
    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// Segment ids the generator mounts: 1..=6 memory, 7..=8 disk.
const SEGMENT_IDS: u64 = 8;

/// The size the generator declares its segments with (one time in six a
/// mount declares another, which a mounted segment refuses).
const SEGMENT_BYTES: u64 = 32_768;

/// The segment `id` as the generator declares it: its owner is store node
/// `100 + id % 3`, on `host-{id % 3}`.
fn generated_segment(id: u64, size: u64) -> SegmentSpec {
    let spec = segment(id, size, &format!("host-{}", id % 3));
    if id > 6 { spec.ssd() } else { spec }
}

fn owner_of(id: u64) -> ClientId {
    ClientId(100 + id % 3)
}

/// The store node whose segments the generator dedicates to
/// [`DEDICATED_TENANT`] when it mounts them itself.
const DEDICATED_NODE: ClientId = ClientId(102);
/// The store node whose remounts the generator makes `ReattachSegments`.
const REATTACHING_NODE: ClientId = ClientId(100);
/// The tenant [`DEDICATED_NODE`]'s segments serve (one `random_put` gives
/// a quarter of its keys to).
const DEDICATED_TENANT: &str = "team-a";

/// A mount by `client` of `segments` (one: `MountSegment`), dedicated to
/// [`DEDICATED_TENANT`] when `client` is [`DEDICATED_NODE`], a re-attach
/// when it is [`REATTACHING_NODE`] (no draw of its own: logs of earlier
/// seeds keep their shape).
fn mount_as(client: ClientId, mut segments: Vec<SegmentSpec>, remount: bool) -> Command {
    let credential = credential_of(client);
    let tenant = DEDICATED_TENANT.to_string();
    match (client == DEDICATED_NODE, remount) {
        (false, false) => mount_cmd(client, segments.remove(0)),
        // The first node's remounts re-attach (a restart on its memory).
        (false, true) if client == REATTACHING_NODE => {
            Command::ReattachSegments { client, credential, segments, tenant: None }
        }
        (false, true) => remount_cmd(client, segments),
        (true, false) => Command::MountTenantSegment { client, credential, segment: segments.remove(0), tenant },
        (true, true) => Command::RemountTenantSegments { client, credential, segments, tenant },
    }
}

/// A segment id: one that is mounted three times in four, else any of the
/// generator's (mounted or not).
fn some_segment(rng: &mut Rng, state: &MetaState) -> SegmentId {
    let mounted: Vec<SegmentId> = state.segments().map(|s| s.spec.id).collect();
    match rng.pick(&mounted) {
        Some(id) if !rng.one_in(4) => *id,
        _ => SegmentId(1 + rng.below(SEGMENT_IDS)),
    }
}

/// A range for an object of `size` bytes (its length on the arena's tier)
/// inside arena `id`, if one fits: on free bytes when a few random tries or
/// a first-fit scan find some, else on taken bytes (to be refused); one
/// time in eight anywhere in the arena, free or not.
fn range_in_arena(rng: &mut Rng, state: &MetaState, id: ArenaId, size: u64) -> Option<(SegmentId, Range)> {
    let arena = state.arena(id)?;
    let seg = state.segment(arena.segment)?;
    let align = seg.tier().align_bytes();
    let len = seg.tier().range_len(size)?;
    let fitting: Vec<Range> = arena.extents.iter().copied().filter(|e| e.len >= len).collect();
    let mut taken = None;
    let anywhere = rng.one_in(8);
    for _ in 0..3 {
        let extent = *rng.pick(&fitting)?;
        let at = if rng.one_in(2) { 0 } else { rng.below((extent.len - len) / align + 1) };
        let range = Range::new(extent.offset + at * align, len);
        if anywhere || seg.is_free(range) {
            return Some((arena.segment, range));
        }
        taken = Some(range);
    }
    let first_fit = fitting.iter().find_map(|e| {
        (0..=(e.len - len) / align).map(|i| Range::new(e.offset + i * align, len)).find(|r| seg.is_free(*r))
    });
    Some((arena.segment, first_fit.or(taken)?))
}

/// A random command, aimed at what exists in `state` (its objects, arenas,
/// segments, clients) so that most apply and some are refused: wrong
/// owners and credentials, stale versions, ranges on used bytes, puts on
/// disk. Over a few thousand draws (each applied before the next) it emits
/// every [`Command`] variant (`tests/t20_determinism.rs` checks it).
pub fn random_command(rng: &mut Rng, state: &MetaState) -> Command {
    let objects: Vec<_> = state.objects().collect();
    let arenas: Vec<ArenaId> = state.arenas().map(|a| a.id).collect();
    let writer = ClientId(1 + rng.below(3));
    match rng.below(100) {
        0..=5 => random_mount(rng, writer),
        6..=7 => {
            let id = 1 + rng.below(SEGMENT_IDS);
            let owner = if rng.one_in(6) { writer } else { owner_of(id) };
            unmount_cmd(owner, SegmentId(id))
        }
        8 => {
            let node = ClientId(100 + rng.below(3));
            let ids = (1..=SEGMENT_IDS).filter(|id| owner_of(*id) == node && !rng.one_in(3));
            mount_as(node, ids.map(|id| generated_segment(id, SEGMENT_BYTES)).collect(), true)
        }
        9..=11 => Command::RemoveObjects {
            victims: random_versions(rng, &objects, true),
            reason: if rng.one_in(2) { RemoveReason::Evict } else { RemoveReason::RemoveAll },
        },
        12 => Command::ExpireClient { client: ClientId(100 + rng.below(4)) },
        13..=15 => {
            let cmds = (0..2 + rng.below(3))
                .map(|_| match random_command(rng, state) {
                    Command::Batch(_) => Command::Noop,
                    c => c,
                })
                .collect();
            Command::Batch(cmds)
        }
        16..=18 => {
            let inner = match random_command(rng, state) {
                Command::Batch(_) | Command::Once { .. } => Command::Noop,
                c => c,
            };
            Command::Once { request_id: 1 + rng.below(6), cmd: Box::new(inner) }
        }
        19 => Command::Noop,
        20..=22 => match rng.pick(&objects) {
            Some(o) => Command::RemoveVersion {
                key: o.key.clone(),
                version: ObjectVersion(o.version.0 + u64::from(rng.one_in(4))),
            },
            None => Command::RemoveVersion { key: "nothing".into(), version: ObjectVersion(1) },
        },
        23..=33 => {
            let len = [4096, 8192, 16_384][rng.below(3) as usize];
            let unit = [1024, 4096, len][rng.below(3) as usize];
            let segment = some_segment(rng, state);
            Command::ArenaGrant { segment, len_bytes: len, unit_bytes: unit, term: 1 + rng.below(3) }
        }
        34..=36 => Command::ArenaTrim {
            arena: rng.pick(&arenas).copied().unwrap_or(ArenaId(0)),
            keep_bytes: rng.below(4) * 2048,
        },
        37..=40 => {
            Command::ArenaReturn { arenas: (0..rng.below(3)).filter_map(|_| rng.pick(&arenas).copied()).collect() }
        }
        41..=68 => random_put(rng, state, &objects, &arenas, writer),
        69..=71 => {
            let retired: Vec<ObjectVersion> = state.retired().map(|r| r.version).collect();
            Command::ReleaseRetired {
                versions: (0..rng.below(3)).filter_map(|_| rng.pick(&retired).copied()).collect(),
            }
        }
        72..=78 => random_add_replica(rng, state, &objects, &arenas),
        79..=82 => random_drop_tier(rng, state, &objects),
        83..=84 => Command::ExpireClientKeepDisk { client: ClientId(100 + rng.below(4)) },
        85..=86 => {
            let detached: Vec<SegmentId> = state.segments().filter(|s| !s.is_attached()).map(|s| s.spec.id).collect();
            let mut segments: Vec<SegmentId> = (0..rng.below(3)).filter_map(|_| rng.pick(&detached).copied()).collect();
            if rng.one_in(3) {
                segments.push(SegmentId(1 + rng.below(SEGMENT_IDS)));
            }
            Command::DropDetached { segments }
        }
        87..=89 => {
            let hit = rng.pick(&objects).and_then(|o| rng.pick(&o.replicas).cloned());
            let (segment, range) = hit.map_or((SegmentId(1), Range::new(0, 4096)), |r| (r.segment, r.range));
            let owner = state.segment(segment).map_or(writer, |s| s.owner);
            let client = if rng.one_in(6) { writer } else { owner };
            Command::DropCorrupt { client, credential: credential_of(client), segment, ranges: vec![range] }
        }
        99 => {
            // Mostly valid names, sometimes one refused; 0 removes.
            let tenant = ["team-a", "team-b", "bad name"][rng.below(3) as usize].to_string();
            Command::SetTenantQuota { tenant, bytes: [0, 4096, 1 << 20][rng.below(3) as usize] }
        }
        _ => {
            let arena = rng.pick(&arenas).copied().unwrap_or(ArenaId(0));
            let mut ranges = Vec::new();
            for _ in 0..1 + rng.below(2) {
                let len = 1 + rng.below(8192);
                ranges.extend(range_in_arena(rng, state, arena, len).map(|(_, r)| r));
            }
            Command::ArenaCut { arena, ranges }
        }
    }
}

/// Up to three versioned keys of `objects`; with `stale`, one in four a
/// version ahead of the object's.
fn random_versions(rng: &mut Rng, objects: &[&ObjectMeta], stale: bool) -> Vec<VersionedKey> {
    let mut victims = Vec::new();
    for _ in 0..rng.below(4) {
        if let Some(o) = rng.pick(objects) {
            let version = ObjectVersion(o.version.0 + u64::from(stale && rng.one_in(4)));
            victims.push(VersionedKey { key: o.key.clone(), version });
        }
    }
    victims
}

/// A random `DropTierReplicas`: mostly of an object with copies on both
/// tiers (the drop applies), else of random, maybe stale, versions.
fn random_drop_tier(rng: &mut Rng, state: &MetaState, objects: &[&ObjectMeta]) -> Command {
    // Mostly objects with copies on both tiers, whose drop applies.
    let on = |o: &ObjectMeta, tier| o.replicas.iter().any(|r| state.replica_tier(r) == Some(tier));
    let both: Vec<_> = objects.iter().filter(|o| on(o, Tier::Dram) && on(o, Tier::Ssd)).collect();
    if rng.one_in(3) {
        // One replica of an object with several (a hot key's extra one), or
        // of any object, maybe a stale version or a segment it is not on.
        let many: Vec<_> = objects.iter().filter(|o| o.replicas.len() > 1).collect();
        let o = if rng.one_in(4) { rng.pick(objects) } else { rng.pick(&many).copied() };
        if let Some(o) = o {
            let segment = match rng.pick(&o.replicas) {
                Some(r) if !rng.one_in(6) => r.segment,
                _ => some_segment(rng, state),
            };
            let version = ObjectVersion(o.version.0 + u64::from(rng.one_in(6)));
            return Command::DropReplica { victim: VersionedKey { key: o.key.clone(), version }, segment };
        }
    }
    let victims = match rng.pick(&both) {
        Some(o) if !rng.one_in(4) => vec![VersionedKey { key: o.key.clone(), version: o.version }],
        _ => random_versions(rng, objects, true),
    };
    Command::DropTierReplicas { victims, tier: if rng.one_in(2) { Tier::Dram } else { Tier::Ssd } }
}

/// A random `MountSegment`: mostly by the segment's owner, sometimes by
/// another client or with an impostor's credential.
fn random_mount(rng: &mut Rng, writer: ClientId) -> Command {
    let id = 1 + rng.below(SEGMENT_IDS);
    let owner = if rng.one_in(8) { writer } else { owner_of(id) };
    let size = if rng.one_in(6) { [16_384, 65_536][rng.below(2) as usize] } else { SEGMENT_BYTES };
    let mut cmd = mount_as(owner, vec![generated_segment(id, size)], false);
    if rng.one_in(10)
        && let Command::MountSegment { credential, .. } | Command::MountTenantSegment { credential, .. } = &mut cmd
    {
        *credential = credential_of(ClientId(999)); // an impostor
    }
    cmd
}

/// A random `PutCommit` from `writer`: mostly on free bytes of memory
/// arenas, sometimes on taken bytes, a disk arena or one that may not exist.
fn random_put(
    rng: &mut Rng,
    state: &MetaState,
    objects: &[&ObjectMeta],
    arenas: &[ArenaId],
    writer: ClientId,
) -> Command {
    let existing = rng.pick(objects).map(|o| o.key.clone());
    let key = match existing {
        Some(k) if rng.one_in(4) => k,
        // Some in the tenants `SetTenantQuota` gives quotas to.
        // A quarter in the tenant `SetTenantQuota` gives quotas to (no
        // draw of its own: logs of earlier seeds keep their shape).
        _ => {
            let n = rng.below(64);
            let key = format!("k{n}");
            match (n % 4, mooncake_segment::tenant::Tenant::parse(DEDICATED_TENANT)) {
                (0, Ok(team)) => team.scope(&key),
                _ => key,
            }
        }
    };
    let largest = if rng.one_in(4) { 5000 } else { 2048 };
    let size = 1 + rng.below(largest);
    // Puts go to memory; one time in ten one is aimed at any arena
    // (a disk one is refused). A few tries for free bytes.
    let choices = if rng.one_in(10) { arenas.to_vec() } else { arenas_on(state, Tier::Dram) };
    let want = 1 + rng.below(2) as usize;
    let mut replicas: Vec<PlacedReplica> = Vec::new();
    let mut taken = None;
    for _ in 0..4 {
        let Some(arena) = rng.pick(&choices).copied() else { break };
        let Some((segment, range)) = range_in_arena(rng, state, arena, size) else { continue };
        if replicas.iter().any(|r| r.segment == segment) {
            continue;
        }
        let replica = PlacedReplica { segment, arena, range };
        if state.segment(segment).is_some_and(|s| s.is_free(range)) {
            replicas.push(replica);
            if replicas.len() == want {
                break;
            }
        } else {
            taken = Some(replica);
        }
    }
    if replicas.is_empty() {
        // On taken bytes, or in an arena that may not exist.
        let range = Range::new(0, Tier::Dram.range_len(size).unwrap_or(size));
        let stray = PlacedReplica { segment: SegmentId(1), arena: ArenaId(rng.below(4)), range };
        replicas.push(taken.unwrap_or(stray));
    }
    let checksum = rng.below(3) as u32;
    let new = NewObject {
        client: writer,
        key,
        size_bytes: size,
        checksum,
        pin: [Pin::None, Pin::Soft, Pin::Hard, Pin::SoftFor { ttl_ms: 50 }][rng.below(4) as usize],
        replicas,
        upsert: rng.one_in(3),
    };
    match checksum {
        0 => Command::PutCommitInQuota(new),
        _ => Command::PutCommit(new),
    }
}

/// A random `AddReplica`: a copy of an object to a segment without one,
/// mostly on disk (offload), sometimes of a stale version.
fn random_add_replica(rng: &mut Rng, state: &MetaState, objects: &[&ObjectMeta], arenas: &[ArenaId]) -> Command {
    let Some(o) = rng.pick(objects) else {
        let replica = PlacedReplica { segment: SegmentId(7), arena: ArenaId(0), range: Range::new(0, 4096) };
        return Command::AddReplica { key: "nothing".into(), version: ObjectVersion(1), replica };
    };
    // A copy goes to a segment without one, mostly on disk (offload).
    let free_of = |ids: Vec<ArenaId>| -> Vec<ArenaId> {
        ids.into_iter()
            .filter(|id| state.arena(*id).is_some_and(|a| o.replicas.iter().all(|r| r.segment != a.segment)))
            .collect()
    };
    let mut choices = match rng.below(6) {
        0 => arenas.to_vec(),
        1 => free_of(arenas_on(state, Tier::Dram)),
        _ => free_of(arenas_on(state, Tier::Ssd)),
    };
    if choices.is_empty() {
        choices = free_of(arenas.to_vec());
    }
    let arena = rng.pick(&choices).copied().unwrap_or(ArenaId(0));
    let version = ObjectVersion(o.version.0 + u64::from(rng.one_in(8)));
    let (segment, range) =
        range_in_arena(rng, state, arena, o.size_bytes).unwrap_or((SegmentId(7), Range::new(0, 4096)));
    Command::AddReplica { key: o.key.clone(), version, replica: PlacedReplica { segment, arena, range } }
}

/// The arenas on segments of `tier`.
fn arenas_on(state: &MetaState, tier: Tier) -> Vec<ArenaId> {
    state.arenas().filter(|a| state.segment(a.segment).is_some_and(|s| s.tier() == tier)).map(|a| a.id).collect()
}
