//! Pinned formats: the exact bytes of every log command and answer, the log
//! entry and Raft metadata values, the Raft messages between masters, and
//! the snapshot image and file, and the data directory: format v1.
//!
//! Why: postcard writes an enum variant as its position and a struct as its
//! fields in order, with no names. Bytes already in logs, in snapshots and in
//! flight between masters of different versions are read back by position,
//! so inserting a variant anywhere but at the end, reordering fields or
//! changing a field's type silently changes what existing logs mean. Each
//! case below encodes a fixed value and compares it with checked-in bytes,
//! then decodes those bytes back to the value; the variant tables are
//! exhaustive `match`es, so a new variant does not compile until it has a
//! golden case. The rules to follow when one fails are in [`RULES`] (and in
//! `docs/STATE_MACHINE.md`, "Changing the formats").
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use mooncake_raft_store::state::{ClientEntry, DetachedDisk, ObjectMeta, RetiredObject, StateImage};
use mooncake_raft_store::testing::{COMMAND_VARIANTS, SegmentSpecExt, command_variant, segment};
use mooncake_raft_store::*;
use mooncake_segment::{ClientId, Range, SegmentId};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    BasicNode, CommittedLeaderId, EntryPayload, Membership, RaftSnapshotBuilder, SnapshotMeta, StoredMembership, Vote,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What to do when a golden test fails; printed with every failure.
const RULES: &str = "\
The persisted or wire encoding changed. Format v1 is declared: logs, snapshots and messages already \
written are decoded by position (postcard: enum variant index, struct field order), so:
  * add a Command / Response / MetaError variant only at the END of its enum; never insert, reorder or \
remove one (one no longer proposed keeps its position and its apply);
  * never change the fields of an existing variant or logged struct: add a new variant instead;
  * a change to the snapshot image (StateImage and the types inside it) needs a new \
SNAPSHOT_SCHEMA_VERSION, the old layout kept with an upgrade in decode_image, and a golden image of \
the new version here (the old golden must still decode and hash as it did);
  * a change to the sled layout (trees, keys, log entry or vote encoding) needs a new \
DATA_DIR_FORMAT_VERSION and an upgrade of older data directories;
  * only then update the golden hex here (the failure shows the new bytes), in the same change.
See docs/STATE_MACHINE.md, \"Changing the formats\".";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd golden hex {hex:?}");
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("golden hex")).collect()
}

/// Asserts `value` encodes to `golden` (hex) and `golden` decodes to `value`.
fn pin<T: Serialize + DeserializeOwned + Debug>(what: &str, value: &T, golden: &str) {
    let actual = hex(&codec::encode(what, value).expect("encode"));
    assert!(
        actual == golden,
        "the encoding of {what} changed\n  value:  {value:?}\n  golden: {golden}\n  actual: {actual}\n{RULES}"
    );
    let back: T = codec::decode(what, &unhex(golden)).unwrap_or_else(|e| panic!("{what}: {e}\n{RULES}"));
    assert_eq!(
        format!("{back:?}"),
        format!("{value:?}"),
        "the golden bytes of {what} decode to another value\n{RULES}"
    );
}

/// Asserts every position below `count` has a case, each case's bytes start
/// with its position (the variant index, one byte below 128), and no
/// variant exists at `count` (one appended without a golden case).
fn pin_positions<T: DeserializeOwned + Debug>(enum_name: &str, positions: &[(usize, String)], count: usize) {
    let covered: BTreeSet<usize> = positions.iter().map(|(p, _)| *p).collect();
    let all: BTreeSet<usize> = (0..count).collect();
    assert_eq!(covered, all, "{enum_name}: every variant needs a golden case\n{RULES}");
    for (position, golden) in positions {
        assert_eq!(
            unhex(golden)[0] as usize,
            *position,
            "{enum_name} variant {position} is encoded at another position\n{RULES}"
        );
    }
    // Any variant decodes from its index and enough zero bytes (zero
    // numbers, empty strings and lists, first variants, None).
    let mut probe = vec![count as u8];
    probe.resize(64, 0);
    let extra: Result<T, _> = codec::decode(enum_name, &probe);
    assert!(
        extra.is_err(),
        "{enum_name} has a variant at position {count} without a golden case ({extra:?}); add one and raise \
         the count\n{RULES}"
    );
}

// ---------------------------------------------------------------- fixed values

const CLIENT: ClientId = ClientId(9);
const CREDENTIAL: CredentialHash = CredentialHash([7; 32]);
const SEGMENT: SegmentId = SegmentId(1);

fn spec(tier: Tier) -> SegmentSpec {
    segment(SEGMENT.0, 1 << 20, "h").endpoint("h:1").zone("z").tier(tier).shm("/m")
}

fn vkey(key: &str, version: u64) -> VersionedKey {
    VersionedKey { key: key.into(), version: ObjectVersion(version) }
}

fn placed(offset: u64) -> ReplicaPlacement {
    ReplicaPlacement { segment: SEGMENT, range: Range::new(offset, 4096) }
}

fn arena() -> Arena {
    Arena { id: ArenaId(1), segment: SEGMENT, extents: vec![Range::new(65536, 65536)], term: 2 }
}

fn log_id(term: u64, index: u64) -> LogId {
    openraft::LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn membership() -> Membership<NodeId, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::new(format!("n{i}")))).collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
}

fn stored_membership() -> StoredMembership<NodeId, BasicNode> {
    StoredMembership::new(Some(log_id(1, 1)), membership())
}

// ---------------------------------------------------------------- commands

fn command_cases() -> Vec<(Command, &'static str)> {
    let new_object = |pin, upsert| NewObject {
        client: CLIENT,
        key: "k".into(),
        size_bytes: 100,
        checksum: 0xdead_beef,
        pin,
        replicas: vec![PlacedReplica { segment: SEGMENT, arena: ArenaId(1), range: Range::new(64, 128) }],
        upsert,
    };
    vec![
        (
            Command::MountSegment { client: CLIENT, credential: CREDENTIAL, segment: spec(Tier::Dram) },
            concat!(
                "0009",
                "0707070707070707070707070707070707070707070707070707070707070707",
                "0180804003683a310168017a00022f6d"
            ),
        ),
        (
            Command::MountSegment { client: CLIENT, credential: CREDENTIAL, segment: spec(Tier::Ssd) },
            concat!(
                "0009",
                "0707070707070707070707070707070707070707070707070707070707070707",
                "0180804003683a310168017a01022f6d"
            ),
        ),
        (
            Command::UnmountSegment { client: CLIENT, credential: CREDENTIAL, segment: SEGMENT },
            concat!("0109", "0707070707070707070707070707070707070707070707070707070707070707", "01"),
        ),
        (
            Command::RemountSegments { client: CLIENT, credential: CREDENTIAL, segments: vec![spec(Tier::Ssd)] },
            concat!(
                "0209",
                "0707070707070707070707070707070707070707070707070707070707070707",
                "010180804003683a310168017a01022f6d"
            ),
        ),
        (
            Command::RemoveObjects { victims: vec![vkey("a", 3), vkey("b", 4)], reason: RemoveReason::RemoveAll },
            "030201610301620400",
        ),
        (Command::RemoveObjects { victims: vec![vkey("a", 3)], reason: RemoveReason::Evict }, "030101610301"),
        (Command::ExpireClient { client: CLIENT }, "0409"),
        (Command::Batch(vec![Command::Noop, Command::ExpireClient { client: CLIENT }]), "0502070409"),
        (
            Command::Once {
                request_id: u64::MAX,
                cmd: Box::new(Command::RemoveVersion { key: "k".into(), version: ObjectVersion(3) }),
            },
            "06ffffffffffffffffff0108016b03",
        ),
        (Command::Noop, "07"),
        (Command::RemoveVersion { key: "k".into(), version: ObjectVersion(3) }, "08016b03"),
        (Command::ArenaGrant { segment: SEGMENT, len_bytes: 1 << 26, unit_bytes: 4096, term: 2 }, "090180808020802002"),
        (Command::ArenaTrim { arena: ArenaId(1), keep_bytes: 4096 }, "0a018020"),
        (Command::ArenaReturn { arenas: vec![ArenaId(1), ArenaId(2)] }, "0b020102"),
        (Command::PutCommit(new_object(Pin::Hard, false)), "0c09016b64effdb6f50d0201010140800100"),
        (Command::PutCommit(new_object(Pin::None, true)), "0c09016b64effdb6f50d0001010140800101"),
        (
            Command::PutCommit(new_object(Pin::SoftFor { ttl_ms: 1000 }, false)),
            "0c09016b64effdb6f50d03e80701010140800100",
        ),
        (Command::ReleaseRetired { versions: vec![ObjectVersion(6)] }, "0d0106"),
        (
            Command::AddReplica {
                key: "k".into(),
                version: ObjectVersion(3),
                replica: PlacedReplica { segment: SEGMENT, arena: ArenaId(2), range: Range::new(4096, 4096) },
            },
            "0e016b03010280208020",
        ),
        (Command::DropTierReplicas { victims: vec![vkey("a", 3)], tier: Tier::Dram }, "0f0101610300"),
        (Command::DropTierReplicas { victims: vec![vkey("a", 3)], tier: Tier::Ssd }, "0f0101610301"),
        (Command::ExpireClientKeepDisk { client: CLIENT }, "1009"),
        (Command::DropDetached { segments: vec![SEGMENT] }, "110101"),
        (
            Command::DropCorrupt {
                client: CLIENT,
                credential: CREDENTIAL,
                segment: SEGMENT,
                ranges: vec![Range::new(8192, 4096)],
            },
            "12090707070707070707070707070707070707070707070707070707070707070707010180408020",
        ),
        (Command::ArenaCut { arena: ArenaId(2), ranges: vec![Range::new(8192, 4096)] }, "13020180408020"),
        (Command::SetTenantQuota { tenant: "team-a".into(), bytes: 1 << 30 }, "14067465616d2d618080808004"),
        (Command::PutCommitInQuota(new_object(Pin::Hard, false)), "1509016b64effdb6f50d0201010140800100"),
        (
            Command::MountTenantSegment {
                client: CLIENT,
                credential: CREDENTIAL,
                segment: spec(Tier::Dram),
                tenant: "team-a".into(),
            },
            "160907070707070707070707070707070707070707070707070707070707070707070180804003683a310168017a00022f6d067465616d2d61",
        ),
        (
            Command::RemountTenantSegments {
                client: CLIENT,
                credential: CREDENTIAL,
                segments: vec![spec(Tier::Dram)],
                tenant: "team-a".into(),
            },
            "17090707070707070707070707070707070707070707070707070707070707070707010180804003683a310168017a00022f6d067465616d2d61",
        ),
        (
            Command::ReattachSegments {
                client: CLIENT,
                credential: CREDENTIAL,
                segments: vec![spec(Tier::Dram)],
                tenant: None,
            },
            "18090707070707070707070707070707070707070707070707070707070707070707010180804003683a310168017a00022f6d00",
        ),
        (Command::DropReplica { victim: vkey("a", 3), segment: SegmentId(2) }, "1901610302"),
    ]
}

#[test]
fn every_command_encodes_to_its_golden_bytes() {
    for (cmd, golden) in command_cases() {
        pin("Command", &cmd, golden);
    }
}

#[test]
fn every_command_variant_is_pinned_at_its_position() {
    let positions: Vec<(usize, String)> =
        command_cases().iter().map(|(c, golden)| (command_variant(c), golden.to_string())).collect();
    pin_positions::<Command>("Command", &positions, COMMAND_VARIANTS);
}

#[test]
fn a_request_is_its_timestamp_then_its_command() {
    let req = Request { ts_ms: 1_700_000_000_000, cmd: Command::Noop };
    pin("Request", &req, "80d095ffbc3107");
}

// ---------------------------------------------------------------- answers

fn response_position(r: &Response) -> usize {
    match r {
        Response::Ok => 0,
        Response::Removed { .. } => 1,
        Response::ArenaGranted(_) => 2,
        Response::Committed { .. } => 3,
        Response::Err(_) => 4,
        Response::Batch(_) => 5,
    }
}
const RESPONSE_VARIANTS: usize = 6;

fn response_cases() -> Vec<(Response, &'static str)> {
    vec![
        (Response::Ok, "00"),
        (Response::Removed { count: 2 }, "0102"),
        (Response::ArenaGranted(arena()), "0201010180800480800402"),
        (Response::Committed { version: ObjectVersion(3) }, "0303"),
        (Response::Err(MetaError::ObjectNotFound("k".into())), "0401016b"),
        (Response::Batch(vec![Response::Ok, Response::Removed { count: 1 }]), "0502000101"),
    ]
}

fn meta_error_position(e: &MetaError) -> usize {
    match e {
        MetaError::InvalidParams(_) => 0,
        MetaError::ObjectNotFound(_) => 1,
        MetaError::ObjectAlreadyExists(_) => 2,
        MetaError::ObjectHasLease(_) => 3,
        MetaError::IllegalClient(_) => 4,
        MetaError::NoAvailableHandle(_) => 5,
        MetaError::SegmentNotFound(_) => 6,
        MetaError::SegmentAlreadyExists(_) => 7,
        MetaError::PutExpired(_) => 8,
        MetaError::PermissionDenied(_) => 9,
        MetaError::QuotaExceeded(_) => 10,
    }
}
const META_ERROR_VARIANTS: usize = 11;

fn meta_error_cases() -> Vec<(MetaError, &'static str)> {
    vec![
        (MetaError::InvalidParams("x".into()), "000178"),
        (MetaError::ObjectNotFound("x".into()), "010178"),
        (MetaError::ObjectAlreadyExists("x".into()), "020178"),
        (MetaError::ObjectHasLease("x".into()), "030178"),
        (MetaError::IllegalClient("x".into()), "040178"),
        (MetaError::NoAvailableHandle("x".into()), "050178"),
        (MetaError::SegmentNotFound("x".into()), "060178"),
        (MetaError::SegmentAlreadyExists("x".into()), "070178"),
        (MetaError::PutExpired("x".into()), "080178"),
        (MetaError::PermissionDenied("x".into()), "090178"),
        (MetaError::QuotaExceeded("x".into()), "0a0178"),
    ]
}

#[test]
fn every_response_and_error_encodes_to_its_golden_bytes() {
    for (r, golden) in response_cases() {
        pin("Response", &r, golden);
    }
    for (e, golden) in meta_error_cases() {
        pin("MetaError", &e, golden);
    }
}

#[test]
fn every_response_and_error_variant_is_pinned_at_its_position() {
    let positions: Vec<(usize, String)> =
        response_cases().iter().map(|(r, golden)| (response_position(r), golden.to_string())).collect();
    pin_positions::<Response>("Response", &positions, RESPONSE_VARIANTS);
    let positions: Vec<(usize, String)> =
        meta_error_cases().iter().map(|(e, golden)| (meta_error_position(e), golden.to_string())).collect();
    pin_positions::<MetaError>("MetaError", &positions, META_ERROR_VARIANTS);
}

#[test]
fn small_enums_inside_commands_and_images_are_pinned() {
    fn position_of_tier(t: Tier) -> usize {
        match t {
            Tier::Dram => 0,
            Tier::Ssd => 1,
        }
    }
    fn position_of_pin(p: Pin) -> usize {
        match p {
            Pin::None => 0,
            Pin::Soft => 1,
            Pin::Hard => 2,
            Pin::SoftFor { .. } => 3,
        }
    }
    fn position_of_reason(r: RemoveReason) -> usize {
        match r {
            RemoveReason::RemoveAll => 0,
            RemoveReason::Evict => 1,
        }
    }
    let tiers: Vec<(usize, String)> = [Tier::Dram, Tier::Ssd].map(|t| (position_of_tier(t), hex_of(&t))).into();
    pin_positions::<Tier>("Tier", &tiers, 2);
    let pins: Vec<(usize, String)> = [Pin::None, Pin::Soft, Pin::Hard, Pin::SoftFor { ttl_ms: 1000 }]
        .map(|p| (position_of_pin(p), hex_of(&p)))
        .into();
    pin_positions::<Pin>("Pin", &pins, 4);
    let reasons: Vec<(usize, String)> =
        [RemoveReason::RemoveAll, RemoveReason::Evict].map(|r| (position_of_reason(r), hex_of(&r))).into();
    pin_positions::<RemoveReason>("RemoveReason", &reasons, 2);
}

fn hex_of<T: Serialize>(value: &T) -> String {
    hex(&codec::encode("value", value).expect("encode"))
}

// ---------------------------------------------------------------- log and Raft metadata

#[test]
fn log_entries_and_raft_metadata_are_pinned() {
    let blank = Entry { log_id: log_id(1, 1), payload: EntryPayload::Blank };
    pin("log entry (blank)", &blank, "01010100");
    let normal = Entry {
        log_id: log_id(2, 300),
        payload: EntryPayload::Normal(Request { ts_ms: 1_700_000_000_000, cmd: Command::Noop }),
    };
    pin("log entry (normal)", &normal, "0201ac020180d095ffbc3107");
    let members = Entry { log_id: log_id(1, 2), payload: EntryPayload::Membership(membership()) };
    pin("log entry (membership)", &members, "0101020201030102030301026e3102026e3203026e33");
    // raft_meta values: vote, last_purged, committed, cluster_id.
    pin("vote (uncommitted)", &Vote::<NodeId>::new(3, 2), "030200");
    pin("vote (committed)", &Vote::<NodeId>::new_committed(3, 2), "030201");
    pin("last_purged", &log_id(2, 300), "0201ac02");
    pin("committed", &log_id(2, 300), "0201ac02"); // cleared: the key is removed
    pin("cluster_id", &"c-1".to_string(), "03632d31");
}

#[test]
fn raft_messages_between_masters_are_pinned() {
    let vote = Vote::<NodeId>::new_committed(3, 2);
    pin("VoteRequest", &VoteRequest { vote: Vote::new(4, 2), last_log_id: Some(log_id(3, 9)) }, "04020001030109");
    pin(
        "VoteResponse",
        &VoteResponse { vote, vote_granted: true, last_log_id: Some(log_id(3, 9)) },
        "0302010101030109",
    );
    let entry = Entry {
        log_id: log_id(3, 10),
        payload: EntryPayload::Normal(Request { ts_ms: 5, cmd: Command::ExpireClient { client: CLIENT } }),
    };
    let append = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: Some(log_id(3, 9)),
        entries: vec![entry],
        leader_commit: Some(log_id(3, 8)),
    };
    pin("AppendEntriesRequest", &append, "030201010301090103010a0105040901030108");
    pin("AppendEntriesResponse::Success", &AppendEntriesResponse::<NodeId>::Success, "00");
    pin(
        "AppendEntriesResponse::PartialSuccess",
        &AppendEntriesResponse::PartialSuccess(Some(log_id(3, 9))),
        "0101030109",
    );
    pin("AppendEntriesResponse::Conflict", &AppendEntriesResponse::<NodeId>::Conflict, "02");
    pin("AppendEntriesResponse::HigherVote", &AppendEntriesResponse::HigherVote(vote), "03030201");
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(3, 9)),
        last_membership: stored_membership(),
        snapshot_id: "3-1-9-0".into(),
    };
    let install =
        InstallSnapshotRequest::<TypeConfig> { vote, meta, offset: 0, data: vec![3, 0, 0, 0, 1, 2], done: true };
    pin(
        "InstallSnapshotRequest",
        &install,
        "030201010301090101010101030102030301026e3102026e3203026e3307332d312d392d30000603000000010201",
    );
    pin("InstallSnapshotResponse", &InstallSnapshotResponse { vote }, "030201");
}

// ---------------------------------------------------------------- snapshot images

/// The memory segment of the fixed image (the disk segment is [`SEGMENT`]).
const MEMORY: SegmentId = SegmentId(2);

/// Objects of the fixed image: one soft-pinned for a second on the disk
/// segment, one hard-pinned in memory.
fn objects() -> Vec<ObjectMeta> {
    vec![
        ObjectMeta {
            key: "k".into(),
            version: ObjectVersion(3),
            size_bytes: 100,
            checksum: 5,
            writer: CLIENT,
            replicas: vec![placed(0)],
            pin: Pin::SoftFor { ttl_ms: 1000 },
            committed_ms: 2,
        },
        ObjectMeta {
            key: "p".into(),
            version: ObjectVersion(6),
            size_bytes: 4096,
            checksum: 0xdead_beef,
            writer: CLIENT,
            replicas: vec![ReplicaPlacement { segment: MEMORY, range: Range::new(0, 4096) }],
            pin: Pin::Hard,
            committed_ms: 6,
        },
    ]
}

const NOW_MS: u64 = 1_700_000_000_000;

/// The format-v1 image with something in every field: a detached disk
/// segment (its owner expired) and an attached memory segment with an
/// arena, objects on both, a retired object, remembered request ids by age
/// with the request clock anchored apart from `now_ms` (as after a clock
/// jump back).
fn image_v1() -> StateImage {
    StateImage {
        last_applied: Some(log_id(2, 42)),
        last_membership: stored_membership(),
        now_ms: NOW_MS,
        next_version: 7,
        segments: vec![
            (spec(Tier::Ssd), CLIENT),
            (segment(MEMORY.0, 1 << 20, "h").endpoint("h:2").zone("z").shm("/n"), CLIENT),
        ],
        objects: objects(),
        clients: vec![ClientEntry { id: CLIENT, registered_ms: 1, credential: CREDENTIAL }],
        requests: vec![(77, 1_000, Response::Ok), (78, 0, Response::Err(MetaError::PutExpired("x".into())))],
        request_anchor_ts_ms: NOW_MS - 60_000,
        arenas: vec![Arena { id: ArenaId(1), segment: MEMORY, extents: vec![Range::new(65536, 65536)], term: 2 }],
        next_arena: 2,
        retired: vec![RetiredObject {
            version: ObjectVersion(5),
            key: "r".into(),
            replicas: vec![placed(8192)],
            retired_ms: 4,
        }],
        detached: vec![(SEGMENT, DetachedDisk { since_ms: 5, credential: CREDENTIAL })],
        tenant_quotas: Vec::new(),
        segment_tenants: Vec::new(),
    }
}

/// The schema-2 image: the format-v1 one, and two tenants' quotas.
fn image_v2() -> StateImage {
    StateImage { tenant_quotas: vec![("team-a".into(), 1 << 30), ("team-b".into(), 4096)], ..image_v1() }
}

/// The snapshot image of format v1, header included.
const IMAGE_V1: &str = concat!(
    "010000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107020180804003683a310168017a",
    "01022f6d090280804003683a320168017a00022f6e0902016b03640509010100802003e807020170068020effdb6f50d0901",
    "0200802002060109010707070707070707070707070707070707070707070707070707070707070707024de807004e000408",
    "0178a0fb91ffbc31010102018080048080040202010501720101804080200401010507070707070707070707070707070707",
    "07070707070707070707070707070707",
);
/// `state_hash` of the format-v1 golden state: snapshot files carry it and
/// masters compare it; a later version reading this image must compute the
/// same.
const IMAGE_V1_STATE_HASH: u64 = 0x5ab6_d379_3a79_eec4;

/// The snapshot image of schema 2 (format v1 and tenants' quotas), header included.
const IMAGE_V2: &str = concat!(
    "020000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107020180804003683a310168017a",
    "01022f6d090280804003683a320168017a00022f6e0902016b03640509010100802003e807020170068020effdb6f50d0901",
    "0200802002060109010707070707070707070707070707070707070707070707070707070707070707024de807004e000408",
    "0178a0fb91ffbc31010102018080048080040202010501720101804080200401010507070707070707070707070707070707",
    "0707070707070707070707070707070702067465616d2d618080808004067465616d2d628020",
);

/// The schema-3 image: the schema-2 one, and its memory segment dedicated
/// to the default tenant (whose object is on it).
fn image_v3() -> StateImage {
    StateImage { segment_tenants: vec![(MEMORY, "default".into())], ..image_v2() }
}

/// The snapshot image of schema 3 (schema 2 and dedicated segments), header included.
const IMAGE_V3: &str = concat!(
    "030000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107020180804003683a310168017a",
    "01022f6d090280804003683a320168017a00022f6e0902016b03640509010100802003e807020170068020effdb6f50d0901",
    "0200802002060109010707070707070707070707070707070707070707070707070707070707070707024de807004e000408",
    "0178a0fb91ffbc31010102018080048080040202010501720101804080200401010507070707070707070707070707070707",
    "0707070707070707070707070707070702067465616d2d618080808004067465616d2d62802001020764656661756c74",
);

#[test]
fn the_snapshot_image_of_schema_3_is_pinned_and_a_state_without_dedicated_segments_is_written_as_before() {
    assert_eq!(SNAPSHOT_SCHEMA_VERSION, 3, "a new snapshot schema version needs its own golden image\n{RULES}");
    let state = MetaState::from_image(image_v3()).expect("the fixed image is consistent");
    state.check_invariants().expect("the fixed state keeps the invariants");
    let actual = hex(&encode_image(&state).expect("encode"));
    assert!(actual == IMAGE_V3, "the snapshot image changed\n  golden: {IMAGE_V3}\n  actual: {actual}\n{RULES}");
    let back = decode_image(&unhex(IMAGE_V3)).expect("decode the golden image");
    assert_eq!(back.to_image(), image_v3(), "{RULES}");
    assert_eq!(back.segment(MEMORY).and_then(|s| s.tenant()), Some("default"));
    let v2 = MetaState::from_image(image_v2()).expect("consistent");
    assert_ne!(back.state_hash(), v2.state_hash(), "the dedicated segments count in the state hash");
    // Without dedicated segments the image is schema 2 (or 1), byte for byte.
    assert_eq!(hex(&encode_image(&v2).unwrap()), IMAGE_V2);
    // A dedication naming an unknown segment, or no tenant, is a corrupt image.
    for bad in [vec![(SegmentId(77), "default".to_string())], vec![(MEMORY, "bad name".to_string())]] {
        let e = MetaState::from_image(StateImage { segment_tenants: bad.clone(), ..image_v2() });
        assert!(e.is_err(), "{bad:?} was taken");
    }
}

#[test]
fn the_snapshot_image_of_schema_2_is_pinned_and_a_state_without_quotas_is_written_as_schema_1() {
    let state = MetaState::from_image(image_v2()).expect("the fixed image is consistent");
    let actual = hex(&encode_image(&state).expect("encode"));
    assert!(actual == IMAGE_V2, "the snapshot image changed\n  golden: {IMAGE_V2}\n  actual: {actual}\n{RULES}");
    let back = decode_image(&unhex(IMAGE_V2)).expect("decode the golden image");
    assert_eq!(back.to_image(), image_v2(), "{RULES}");
    assert_eq!(back.tenant_quota("team-a"), Some(1 << 30));
    assert_ne!(back.state_hash(), IMAGE_V1_STATE_HASH, "the quotas count in the state hash");
    // Without quotas the image is schema 1, byte for byte (masters of the
    // previous release read it), and hashes as it did.
    let plain = MetaState::from_image(image_v1()).expect("consistent");
    assert_eq!(hex(&encode_image(&plain).unwrap()), IMAGE_V1);
}

#[test]
fn the_snapshot_image_of_format_v1_is_pinned() {
    let state = MetaState::from_image(image_v1()).expect("the fixed image is consistent");
    let actual = hex(&encode_image(&state).expect("encode"));
    // Snapshots encode the state in place; the schema-1 image type is the same bytes.
    let v1: mooncake_raft_store::state::StateImageV1 = codec::decode("v1", &unhex(&actual)[4..]).unwrap();
    let via_image = [&1u32.to_le_bytes()[..], &codec::encode("image", &v1).unwrap()].concat();
    assert_eq!(actual, hex(&via_image), "the in-place encoding differs from the image's");
    assert!(actual == IMAGE_V1, "the snapshot image changed\n  golden: {IMAGE_V1}\n  actual: {actual}\n{RULES}");
    let back = decode_image(&unhex(IMAGE_V1)).expect("decode the golden image");
    assert_eq!(back.to_image(), image_v1(), "{RULES}");
    assert_eq!(back.client_credential(CLIENT), Some(&CREDENTIAL));
    assert!(back.segment(SEGMENT).is_some_and(|s| !s.is_attached()), "the disk segment is detached");
    assert_eq!(
        back.state_hash(),
        IMAGE_V1_STATE_HASH,
        "the state hash of the golden state changed: {:#x}\n{RULES}",
        back.state_hash()
    );
    // Every replicated part counts in the state hash.
    type Change = fn(&mut StateImage);
    let changes: [(&str, Change); 6] = [
        ("a detached segment", |i| i.detached.clear()),
        ("a client's credential", |i| i.clients[0].credential = CredentialHash([8; 32])),
        ("an arena", |i| i.arenas.clear()),
        ("a retired object", |i| i.retired.clear()),
        ("a remembered answer", |i| i.requests.truncate(1)),
        ("an object's pin", |i| i.objects[0].pin = Pin::Soft),
    ];
    for (what, change) in changes {
        let mut other = image_v1();
        change(&mut other);
        let other = MetaState::from_image(other).expect("consistent");
        assert_ne!(back.state_hash(), other.state_hash(), "the state hash leaves {what} out");
    }
}

/// Data of builds before format v1 (never released) is refused with a
/// message that says what to do, not misread.
#[test]
fn images_of_pre_release_builds_are_refused() {
    let mut pre_release = encode_snapshot_file(&[6, 0, 0, 0, 0xab], 42, 7);
    pre_release[..8].copy_from_slice(b"MCSNAPv1");
    let e = decode_snapshot_file(&pre_release).expect_err("a pre-release snapshot file");
    assert!(matches!(e, StoreError::PreRelease { .. }), "{e}");
    assert!(e.to_string().contains("pre-release build") && e.to_string().contains("--join"), "{e}");
    let e = decode_image(&[6, 0, 0, 0, 0xab]).map(|_| ()).expect_err("a schema this version does not know");
    assert!(matches!(e, StoreError::SchemaVersion { found: 6, supported: 3 }), "{e}");
}

#[test]
fn a_snapshot_file_is_pinned() {
    let file = encode_snapshot_file(&[5, 0, 0, 0, 0xab], 42, 0x1122_3344_5566_7788);
    assert_eq!(
        hex(&file),
        "4d43534e41506631030000002a0000000000000088776655443322110500000000000000b4b9e4a605000000ab",
        "the snapshot file layout changed\n{RULES}"
    );
    let (info, body) = decode_snapshot_file(&file).expect("decode");
    assert_eq!((info.schema_version, info.applied_index, info.state_hash), (3, 42, 0x1122_3344_5566_7788));
    assert_eq!(body, &[5, 0, 0, 0, 0xab]);
}

/// The data directory as sled holds it: which trees, which keys, which
/// bytes. Read back raw, as a newer binary would find it.
#[tokio::test]
async fn the_data_directory_layout_is_pinned() {
    assert_eq!(
        DATA_DIR_FORMAT_VERSION, 1,
        "a new data directory layout needs an upgrade of older directories and golden values here\n{RULES}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = vec![
        Entry { log_id: log_id(1, 1), payload: EntryPayload::Blank },
        Entry {
            log_id: log_id(2, 300),
            payload: EntryPayload::Normal(Request { ts_ms: 1_700_000_000_000, cmd: Command::Noop }),
        },
    ];
    let image = {
        let (mut log, mut sm) = open_store(&StoreOptions::new(dir.path())).expect("open store");
        log.save_vote(&Vote::new_committed(3, 2)).await.expect("vote");
        log.blocking_append(entries.clone()).await.expect("append");
        log.save_committed(Some(log_id(2, 300))).await.expect("committed");
        log.save_cluster_id("c-1").expect("cluster id");
        sm.apply(entries).await.expect("apply");
        sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot");
        sm.export().expect("export").0
    };
    let db = sled::open(dir.path()).expect("reopen raw");
    let tree = |name: &str| db.open_tree(name).expect("tree");
    let value = |t: &str, key: &[u8]| tree(t).get(key).expect("read").map(|v| hex(&v));
    let names: BTreeSet<Vec<u8>> = db.tree_names().into_iter().map(|n| n.to_vec()).collect();
    for name in ["mooncake_meta", "raft_log", "raft_meta", "sm_snapshot"] {
        assert!(names.contains(name.as_bytes()), "no {name} tree in the data directory\n{RULES}");
    }
    assert_eq!(value("mooncake_meta", b"format_version"), Some("01000000".into()), "{RULES}");
    assert_eq!(value("mooncake_meta", b"schema_version"), None, "the key of pre-release builds\n{RULES}");
    // The log: keys are big-endian indexes, values the pinned log entries.
    let log: Vec<(String, String)> =
        tree("raft_log").iter().map(|kv| kv.expect("log")).map(|(k, v)| (hex(&k), hex(&v))).collect();
    let expected = [("0000000000000001", "01010100"), ("000000000000012c", "0201ac020180d095ffbc3107")];
    let expected: Vec<(String, String)> = expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(log, expected, "the raft_log tree changed\n{RULES}");
    assert_eq!(value("raft_meta", b"vote"), Some("030201".into()), "{RULES}");
    assert_eq!(value("raft_meta", b"committed"), Some("0201ac02".into()), "{RULES}");
    assert_eq!(value("raft_meta", b"cluster_id"), Some("03632d31".into()), "{RULES}");
    // The current snapshot, in its own file: magic, body length, crc32c of
    // the body, then the body: openraft's metadata, then the image (pinned
    // above). Nothing of it in sled.
    assert_eq!(value("sm_snapshot", b"current"), None, "{RULES}");
    let file = std::fs::read(dir.path().join("raft-snapshot")).expect("the snapshot file");
    assert_eq!(&file[..8], b"MCRAFTS1", "{RULES}");
    let body = &file[20..];
    assert_eq!(u64::from_le_bytes(file[8..16].try_into().unwrap()), body.len() as u64, "{RULES}");
    assert_eq!(
        u32::from_le_bytes(file[16..20].try_into().unwrap()),
        mooncake_segment::checksum::crc32c(body),
        "{RULES}"
    );
    assert!(hex(body).ends_with(&hex(&image)), "the stored snapshot record changed\n{RULES}");
}

/// A data directory of a pre-release build (its layout version under the
/// old key, no format version) is refused before anything in it is read,
/// with a message naming it and the way out; nothing in it changes.
#[tokio::test]
async fn a_data_directory_of_a_pre_release_build_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open_store(&StoreOptions::new(dir.path())).expect("open store"));
    {
        let db = sled::open(dir.path()).expect("reopen raw");
        let meta = db.open_tree("mooncake_meta").unwrap();
        meta.remove(b"format_version").unwrap();
        meta.insert(b"schema_version", &2u32.to_le_bytes()).unwrap();
        db.flush().unwrap();
    }
    let e = open_store(&StoreOptions::new(dir.path())).err().expect("a pre-release data dir");
    assert!(matches!(e, StoreError::PreRelease { .. }), "{e}");
    assert!(e.to_string().contains(&dir.path().display().to_string()), "names the dir: {e}");
    let db = sled::open(dir.path()).expect("reopen raw");
    let meta = db.open_tree("mooncake_meta").unwrap();
    assert_eq!(meta.get(b"format_version").unwrap(), None, "the refused dir was not marked format v1");
}
