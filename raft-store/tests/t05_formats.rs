//! Pinned formats: the exact bytes of every log command and answer, the log
//! entry and Raft metadata values, the Raft messages between masters, and
//! the snapshot image (current and older schema versions) and file.
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

use mooncake_raft_store::state::{
    ClientEntry, DetachedDisk, DiscardedPut, ObjectMeta, ObjectStatus, RetiredObject, StateImage, StateImageV1,
    StateImageV2,
};
use mooncake_raft_store::testing::{SegmentSpecExt, segment};
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
The persisted or wire encoding changed. Logs, snapshots and messages already written are decoded by \
position (postcard: enum variant index, struct field order), so:
  * add a Command / Response / MetaError variant only at the END of its enum; never insert, reorder or \
remove one (retire it as \"legacy\" and keep applying it);
  * never change the fields of an existing variant or logged struct: add a new variant instead;
  * a change to the snapshot image (StateImage and the types inside it) needs a new \
SNAPSHOT_SCHEMA_VERSION, the old layout kept as StateImageV<n> with an upgrade in decode_image, and a \
golden image of the new version here (the old golden must still decode);
  * a change to the sled layout (trees, keys, log entry or vote encoding) needs a new \
DATA_DIR_SCHEMA_VERSION and an upgrade of older data directories;
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

/// Position of each Command variant in the enum (its encoded index). No `_`
/// arm: a new variant does not compile until it is placed here.
fn command_position(cmd: &Command) -> usize {
    match cmd {
        Command::MountSegment { .. } => 0,
        Command::UnmountSegment { .. } => 1,
        Command::RemountSegments { .. } => 2,
        Command::PutStart(_) => 3,
        Command::PutEnd { .. } => 4,
        Command::PutRevoke { .. } => 5,
        Command::Remove { .. } => 6,
        Command::RemoveObjects { .. } => 7,
        Command::ExpireClient { .. } => 8,
        Command::DiscardPuts { .. } => 9,
        Command::ReleaseDiscarded { .. } => 10,
        Command::Batch(_) => 11,
        Command::Once { .. } => 12,
        Command::Noop => 13,
        Command::RemoveVersion { .. } => 14,
        Command::ArenaGrant { .. } => 15,
        Command::ArenaTrim { .. } => 16,
        Command::ArenaReturn { .. } => 17,
        Command::PutCommit(_) => 18,
        Command::ReleaseRetired { .. } => 19,
        Command::MountSegmentAs { .. } => 20,
        Command::UnmountSegmentAs { .. } => 21,
        Command::RemountSegmentsAs { .. } => 22,
        Command::AddReplica { .. } => 23,
        Command::DropTierReplicas { .. } => 24,
        Command::ExpireClientKeepDisk { .. } => 25,
        Command::DropDetached { .. } => 26,
        Command::DropCorrupt { .. } => 27,
        Command::ArenaCut { .. } => 28,
    }
}
const COMMAND_VARIANTS: usize = 29;

fn command_cases() -> Vec<(Command, &'static str)> {
    let put_start = |pin| PutStart {
        client: CLIENT,
        key: "k".into(),
        size_bytes: 100,
        replica_num: 2,
        preferred: vec![SEGMENT],
        pin,
    };
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
        (Command::MountSegment { client: CLIENT, segment: spec(Tier::Dram) }, "00090180804003683a310168017a00022f6d"),
        (Command::MountSegment { client: CLIENT, segment: spec(Tier::Ssd) }, "00090180804003683a310168017a01022f6d"),
        (Command::UnmountSegment { client: CLIENT, segment: SEGMENT }, "010901"),
        (
            Command::RemountSegments { client: CLIENT, segments: vec![spec(Tier::Dram)] },
            "0209010180804003683a310168017a00022f6d",
        ),
        (Command::PutStart(put_start(Pin::None)), "0309016b6402010100"),
        (Command::PutStart(put_start(Pin::Soft)), "0309016b6402010101"),
        (Command::PutEnd { client: CLIENT, key: "k".into(), checksum: 7 }, "0409016b07"),
        (Command::PutRevoke { client: CLIENT, key: "k".into() }, "0509016b"),
        (Command::Remove { key: "k".into() }, "06016b"),
        (
            Command::RemoveObjects { victims: vec![vkey("a", 3), vkey("b", 4)], reason: RemoveReason::RemoveAll },
            "070201610301620400",
        ),
        (Command::RemoveObjects { victims: vec![vkey("a", 3)], reason: RemoveReason::Evict }, "070101610301"),
        (Command::ExpireClient { client: CLIENT }, "0809"),
        (Command::DiscardPuts { victims: vec![vkey("p", 5)] }, "0901017005"),
        (Command::ReleaseDiscarded { versions: vec![ObjectVersion(5), ObjectVersion(300)] }, "0a0205ac02"),
        (Command::Batch(vec![Command::Noop, Command::ExpireClient { client: CLIENT }]), "0b020d0809"),
        (
            Command::Once {
                request_id: u64::MAX,
                cmd: Box::new(Command::RemoveVersion { key: "k".into(), version: ObjectVersion(3) }),
            },
            "0cffffffffffffffffff010e016b03",
        ),
        (Command::Noop, "0d"),
        (Command::RemoveVersion { key: "k".into(), version: ObjectVersion(3) }, "0e016b03"),
        (Command::ArenaGrant { segment: SEGMENT, len_bytes: 1 << 26, unit_bytes: 4096, term: 2 }, "0f0180808020802002"),
        (Command::ArenaTrim { arena: ArenaId(1), keep_bytes: 4096 }, "10018020"),
        (Command::ArenaReturn { arenas: vec![ArenaId(1), ArenaId(2)] }, "11020102"),
        (Command::PutCommit(new_object(Pin::Hard, false)), "1209016b64effdb6f50d0201010140800100"),
        (Command::PutCommit(new_object(Pin::None, true)), "1209016b64effdb6f50d0001010140800101"),
        (Command::ReleaseRetired { versions: vec![ObjectVersion(6)] }, "130106"),
        (
            Command::MountSegmentAs { client: CLIENT, credential: CREDENTIAL, segment: spec(Tier::Dram) },
            concat!(
                "1409",
                "0707070707070707070707070707070707070707070707070707070707070707",
                "0180804003683a310168017a00022f6d"
            ),
        ),
        (
            Command::UnmountSegmentAs { client: CLIENT, credential: CREDENTIAL, segment: SEGMENT },
            concat!("1509", "0707070707070707070707070707070707070707070707070707070707070707", "01"),
        ),
        (
            Command::RemountSegmentsAs { client: CLIENT, credential: CREDENTIAL, segments: vec![spec(Tier::Ssd)] },
            concat!(
                "1609",
                "0707070707070707070707070707070707070707070707070707070707070707",
                "010180804003683a310168017a01022f6d"
            ),
        ),
        (
            Command::AddReplica {
                key: "k".into(),
                version: ObjectVersion(3),
                replica: PlacedReplica { segment: SEGMENT, arena: ArenaId(2), range: Range::new(4096, 4096) },
            },
            "17016b03010280208020",
        ),
        (Command::DropTierReplicas { victims: vec![vkey("a", 3)], tier: Tier::Dram }, "180101610300"),
        (Command::DropTierReplicas { victims: vec![vkey("a", 3)], tier: Tier::Ssd }, "180101610301"),
        (Command::ExpireClientKeepDisk { client: CLIENT }, "1909"),
        (Command::DropDetached { segments: vec![SEGMENT] }, "1a0101"),
        (
            Command::DropCorrupt {
                client: CLIENT,
                credential: CREDENTIAL,
                segment: SEGMENT,
                ranges: vec![Range::new(8192, 4096)],
            },
            "1b090707070707070707070707070707070707070707070707070707070707070707010180408020",
        ),
        (Command::ArenaCut { arena: ArenaId(2), ranges: vec![Range::new(8192, 4096)] }, "1c020180408020"),
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
        command_cases().iter().map(|(c, golden)| (command_position(c), golden.to_string())).collect();
    pin_positions::<Command>("Command", &positions, COMMAND_VARIANTS);
}

#[test]
fn a_request_is_its_timestamp_then_its_command() {
    let req = Request { ts_ms: 1_700_000_000_000, cmd: Command::Noop };
    pin("Request", &req, "80d095ffbc310d");
}

// ---------------------------------------------------------------- answers

fn response_position(r: &Response) -> usize {
    match r {
        Response::Ok => 0,
        Response::Placed { .. } => 1,
        Response::Removed { .. } => 2,
        Response::ArenaGranted(_) => 3,
        Response::Committed { .. } => 4,
        Response::Err(_) => 5,
        Response::Batch(_) => 6,
    }
}
const RESPONSE_VARIANTS: usize = 7;

fn response_cases() -> Vec<(Response, &'static str)> {
    vec![
        (Response::Ok, "00"),
        (
            Response::Placed { version: ObjectVersion(3), replicas: vec![placed(0), placed(4096)] },
            "010302010080200180208020",
        ),
        (Response::Removed { count: 2 }, "0202"),
        (Response::ArenaGranted(arena()), "0301010180800480800402"),
        (Response::Committed { version: ObjectVersion(3) }, "0403"),
        (Response::Err(MetaError::ObjectNotFound("k".into())), "0501016b"),
        (Response::Batch(vec![Response::Ok, Response::Removed { count: 1 }]), "0602000201"),
    ]
}

fn meta_error_position(e: &MetaError) -> usize {
    match e {
        MetaError::InvalidParams(_) => 0,
        MetaError::ObjectNotFound(_) => 1,
        MetaError::ObjectAlreadyExists(_) => 2,
        MetaError::ObjectHasLease(_) => 3,
        MetaError::ReplicaNotReady(_) => 4,
        MetaError::IllegalClient(_) => 5,
        MetaError::NoAvailableHandle(_) => 6,
        MetaError::SegmentNotFound(_) => 7,
        MetaError::SegmentAlreadyExists(_) => 8,
        MetaError::PutExpired(_) => 9,
        MetaError::PermissionDenied(_) => 10,
    }
}
const META_ERROR_VARIANTS: usize = 11;

fn meta_error_cases() -> Vec<(MetaError, &'static str)> {
    vec![
        (MetaError::InvalidParams("x".into()), "000178"),
        (MetaError::ObjectNotFound("x".into()), "010178"),
        (MetaError::ObjectAlreadyExists("x".into()), "020178"),
        (MetaError::ObjectHasLease("x".into()), "030178"),
        (MetaError::ReplicaNotReady("x".into()), "040178"),
        (MetaError::IllegalClient("x".into()), "050178"),
        (MetaError::NoAvailableHandle("x".into()), "060178"),
        (MetaError::SegmentNotFound("x".into()), "070178"),
        (MetaError::SegmentAlreadyExists("x".into()), "080178"),
        (MetaError::PutExpired("x".into()), "090178"),
        (MetaError::PermissionDenied("x".into()), "0a0178"),
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
    fn position_of_status(s: ObjectStatus) -> usize {
        match s {
            ObjectStatus::Processing => 0,
            ObjectStatus::Complete => 1,
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
    let statuses: Vec<(usize, String)> =
        [ObjectStatus::Processing, ObjectStatus::Complete].map(|s| (position_of_status(s), hex_of(&s))).into();
    pin_positions::<ObjectStatus>("ObjectStatus", &statuses, 2);
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
    pin("log entry (normal)", &normal, "0201ac020180d095ffbc310d");
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
    pin("AppendEntriesRequest", &append, "030201010301090103010a0105080901030108");
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

/// Objects of the fixed images: one complete, one still being written.
fn objects() -> Vec<ObjectMeta> {
    vec![
        ObjectMeta {
            key: "k".into(),
            version: ObjectVersion(3),
            size_bytes: 100,
            checksum: Some(5),
            writer: CLIENT,
            replicas: vec![placed(0)],
            status: ObjectStatus::Complete,
            pin: Pin::Soft,
            created_ms: 1,
            completed_ms: Some(2),
        },
        ObjectMeta {
            key: "p".into(),
            version: ObjectVersion(6),
            size_bytes: 4096,
            checksum: None,
            writer: CLIENT,
            replicas: vec![placed(12288)],
            status: ObjectStatus::Processing,
            pin: Pin::Hard,
            created_ms: 6,
            completed_ms: None,
        },
    ]
}

const NOW_MS: u64 = 1_700_000_000_000;

/// A version-2 image with something in every field.
fn image_v2() -> StateImageV2 {
    StateImageV2 {
        last_applied: Some(log_id(2, 42)),
        last_membership: stored_membership(),
        now_ms: NOW_MS,
        next_version: 7,
        segments: vec![(spec(Tier::Ssd), CLIENT)],
        objects: objects(),
        clients: vec![ClientEntry { id: CLIENT, registered_ms: 1 }],
        discarded: vec![DiscardedPut {
            version: ObjectVersion(4),
            key: "d".into(),
            replicas: vec![placed(4096)],
            discarded_ms: 3,
        }],
        requests: vec![(77, NOW_MS - 5, Response::Ok)],
        arenas: vec![arena()],
        next_arena: 2,
        retired: vec![RetiredObject {
            version: ObjectVersion(5),
            key: "r".into(),
            replicas: vec![placed(8192)],
            retired_ms: 4,
        }],
    }
}

/// The version-3 content as the current image: the version-2 content,
/// request ids by age, the request clock anchored apart from `now_ms` (as
/// after a clock jump back); no client credentials.
fn image_v3() -> StateImage {
    let mut image = StateImage::from_v2(image_v2());
    image.requests = vec![(77, 1_000, Response::Ok), (78, 0, Response::Err(MetaError::PutExpired("x".into())))];
    image.request_anchor_ts_ms = NOW_MS - 60_000;
    image
}

/// The version-4 content: the version-3 content and the client's credential.
fn image_v4() -> StateImage {
    let mut image = image_v3();
    image.client_credentials = vec![(CLIENT, CREDENTIAL)];
    image
}

/// The current image: the version-4 content and the disk segment detached
/// (its owner expired; its arena ended).
fn image_v5() -> StateImage {
    let mut image = image_v4();
    image.detached = vec![(SEGMENT, DetachedDisk { since_ms: 5, credential: Some(CREDENTIAL) })];
    image.arenas = Vec::new();
    image
}

/// The current image: the version-5 content, the complete object
/// soft-pinned for a second.
fn image_v6() -> StateImage {
    let mut image = image_v5();
    image.objects[0].pin = Pin::SoftFor { ttl_ms: 1000 };
    image
}

/// The snapshot image of schema version 6, header included.
const IMAGE_V6: &str = concat!(
    "060000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107010180804003683a310168017a",
    "01022f6d0902016b036401050901010080200103e80701010201700680200009010180608020000206000109010104016401",
    "018020802003024de807004e000509017800020105017201018040802004a0fb91ffbc310109070707070707070707070707",
    "0707070707070707070707070707070707070707010105010707070707070707070707070707070707070707070707070707",
    "070707070707",
);

/// Written by the binaries of schema version 5 (before soft-pin TTLs).
const IMAGE_V5: &str = concat!(
    "050000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107010180804003683a310168017a",
    "01022f6d0902016b036401050901010080200101010102017006802000090101806080200002060001090101040164010180",
    "20802003024de807004e000509017800020105017201018040802004a0fb91ffbc3101090707070707070707070707070707",
    "0707070707070707070707070707070707070101050107070707070707070707070707070707070707070707070707070707",
    "07070707",
);
/// `state_hash` of the version-4 golden state, as version-4 binaries
/// computed it.
const IMAGE_V4_STATE_HASH: u64 = 0xb8b3_e098_a4b6_69c9;

/// Written by the binaries of schema version 4 (before detached disk segments).
const IMAGE_V4: &str = concat!(
    "040000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107010180804003683a310168017a",
    "01022f6d0902016b036401050901010080200101010102017006802000090101806080200002060001090101040164010180",
    "20802003024de807004e00050901780101010180800480800402020105017201018040802004a0fb91ffbc31010907070707",
    "07070707070707070707070707070707070707070707070707070707",
);
/// Written by the binaries of schema version 3 (before client credentials).
const IMAGE_V3: &str = concat!(
    "030000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107010180804003683a310168017a",
    "01022f6d0902016b036401050901010080200101010102017006802000090101806080200002060001090101040164010180",
    "20802003024de807004e00050901780101010180800480800402020105017201018040802004a0fb91ffbc31",
);
/// Written by the binaries of schema version 2 (before the request clock).
const IMAGE_V2: &str = concat!(
    "020000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107010180804003683a310168017a",
    "01022f6d0902016b036401050901010080200101010102017006802000090101806080200002060001090101040164010180",
    "20802003014dfbcf95ffbc31000101010180800480800402020105017201018040802004",
);
/// Written by the binaries of schema version 1 (before arenas).
const IMAGE_V1: &str = concat!(
    "010000000102012a0101010101030102030301026e3102026e3203026e3380d095ffbc3107010180804003683a310168017a",
    "01022f6d0901016b0364010509010100802001010101020109010104016401018020802003014ef6cf95ffbc3105010178",
);
/// `state_hash` of the version-2 golden state, as version-2 binaries
/// computed it (snapshot files carry it; it must not change on upgrade).
const IMAGE_V2_STATE_HASH: u64 = 0x7547_a37c_cc8a_e4a8;
/// `state_hash` of the version-3 golden state, as version-3 binaries
/// computed it.
const IMAGE_V3_STATE_HASH: u64 = 0x4f6c_8228_cf63_ff5f;

#[test]
fn the_snapshot_image_of_this_version_is_pinned() {
    assert_eq!(SNAPSHOT_SCHEMA_VERSION, 6, "a new snapshot schema version needs its own golden image\n{RULES}");
    let state = MetaState::from_image(image_v6()).expect("the fixed image is consistent");
    let actual = hex(&encode_image(&state).expect("encode"));
    // Snapshots encode the state in place; the image type is the same bytes.
    let via_image =
        [&SNAPSHOT_SCHEMA_VERSION.to_le_bytes()[..], &codec::encode("image", &state.to_image()).unwrap()].concat();
    assert_eq!(actual, hex(&via_image), "the in-place encoding differs from the image's");
    assert!(actual == IMAGE_V6, "the snapshot image changed\n  golden: {IMAGE_V6}\n  actual: {actual}\n{RULES}");
    let back = decode_image(&unhex(IMAGE_V6)).expect("decode the golden image");
    assert_eq!(format!("{:?}", back.to_image()), format!("{:?}", image_v6()), "{RULES}");
    assert_eq!(back.client_credential(CLIENT), Some(&CREDENTIAL));
    assert!(back.segment(SEGMENT).is_some_and(|s| !s.is_attached()), "the disk segment is detached");
    // The detached segments are replicated data: the state hash covers them.
    let mut attached = image_v6();
    attached.detached = Vec::new();
    let attached = MetaState::from_image(attached).expect("consistent");
    assert_ne!(back.state_hash(), attached.state_hash(), "the state hash leaves the detached segments out");
}

#[test]
fn images_of_older_schema_versions_are_still_read() {
    // Version 5: the same layout; everything kept.
    let v5 = decode_image(&unhex(IMAGE_V5)).unwrap_or_else(|e| panic!("a version-5 image is refused: {e}\n{RULES}"));
    assert_eq!(format!("{:?}", v5.to_image()), format!("{:?}", image_v5()), "{RULES}");
    // Version 4: everything kept; no segment is detached; the state hashes
    // as it did.
    let v4 = decode_image(&unhex(IMAGE_V4)).unwrap_or_else(|e| panic!("a version-4 image is refused: {e}\n{RULES}"));
    assert_eq!(format!("{:?}", v4.to_image()), format!("{:?}", image_v4()), "{RULES}");
    assert_eq!(v4.client_credential(CLIENT), Some(&CREDENTIAL));
    assert_eq!(v4.state_hash(), IMAGE_V4_STATE_HASH, "the state hash of an upgraded state changed\n{RULES}");
    // Version 3: everything kept; no client has a credential yet (each
    // adopts the one it next mounts with); the state hashes as it did.
    let v3 = decode_image(&unhex(IMAGE_V3)).unwrap_or_else(|e| panic!("a version-3 image is refused: {e}\n{RULES}"));
    assert_eq!(format!("{:?}", v3.to_image()), format!("{:?}", image_v3()), "{RULES}");
    assert_eq!(v3.client_credential(CLIENT), None);
    assert_eq!(v3.state_hash(), IMAGE_V3_STATE_HASH, "the state hash of an upgraded state changed\n{RULES}");
    // Version 2: everything kept; the request clock starts at `now_ms`, so
    // remembered ids keep the age they had.
    let v2 = decode_image(&unhex(IMAGE_V2)).unwrap_or_else(|e| panic!("a version-2 image is refused: {e}\n{RULES}"));
    let expected = StateImage::from_v2(image_v2());
    assert_eq!(format!("{:?}", v2.to_image()), format!("{expected:?}"), "{RULES}");
    assert_eq!(v2.to_image().requests, vec![(77, 5, Response::Ok)], "ids keep their ages");
    assert_eq!(v2.request_clock().anchor_ts_ms, NOW_MS);
    assert_eq!(v2.state_hash(), IMAGE_V2_STATE_HASH, "the state hash of an upgraded state changed\n{RULES}");
    // Version 1: no arenas or retired objects yet.
    let v1 = decode_image(&unhex(IMAGE_V1)).unwrap_or_else(|e| panic!("a version-1 image is refused: {e}\n{RULES}"));
    let old = image_v2();
    let expected = StateImage::from_v1(StateImageV1 {
        last_applied: old.last_applied,
        last_membership: old.last_membership,
        now_ms: old.now_ms,
        next_version: old.next_version,
        segments: old.segments,
        objects: vec![objects()[0].clone()],
        clients: old.clients,
        discarded: old.discarded,
        requests: vec![(78, NOW_MS - 10, Response::Err(MetaError::ObjectNotFound("x".into())))],
    });
    assert_eq!(format!("{:?}", v1.to_image()), format!("{expected:?}"), "{RULES}");
}

#[test]
fn a_snapshot_file_is_pinned() {
    let file = encode_snapshot_file(&[5, 0, 0, 0, 0xab], 42, 0x1122_3344_5566_7788);
    assert_eq!(
        hex(&file),
        "4d43534e41507631060000002a0000000000000088776655443322110500000000000000b4b9e4a605000000ab",
        "the snapshot file layout changed\n{RULES}"
    );
    let (info, body) = decode_snapshot_file(&file).expect("decode");
    assert_eq!((info.schema_version, info.applied_index, info.state_hash), (6, 42, 0x1122_3344_5566_7788));
    assert_eq!(body, &[5, 0, 0, 0, 0xab]);
}

/// The data directory as sled holds it: which trees, which keys, which
/// bytes. Read back raw, as a newer binary would find it.
#[tokio::test]
async fn the_data_directory_layout_is_pinned() {
    assert_eq!(
        DATA_DIR_SCHEMA_VERSION, 2,
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
    assert_eq!(value("mooncake_meta", b"schema_version"), Some("02000000".into()), "{RULES}");
    // The log: keys are big-endian indexes, values the pinned log entries.
    let log: Vec<(String, String)> =
        tree("raft_log").iter().map(|kv| kv.expect("log")).map(|(k, v)| (hex(&k), hex(&v))).collect();
    let expected = [("0000000000000001", "01010100"), ("000000000000012c", "0201ac020180d095ffbc310d")];
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

/// A data directory of layout 1 kept its snapshot in sled's `sm_snapshot`
/// tree: a newer binary starts from it, marks the directory layout 2 (an
/// older binary would not see later snapshots), and the first snapshot it
/// builds goes to the file and removes the old record.
#[tokio::test]
async fn a_data_directory_of_layout_1_is_read_and_upgraded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = vec![Entry {
        log_id: log_id(2, 7),
        payload: EntryPayload::Normal(Request { ts_ms: 1_700_000_000_000, cmd: Command::Noop }),
    }];
    let hash = {
        let (mut log, mut sm) = open_store(&StoreOptions::new(dir.path())).expect("open store");
        log.blocking_append(entries.clone()).await.expect("append");
        log.save_committed(Some(log_id(2, 7))).await.expect("committed");
        sm.apply(entries).await.expect("apply");
        sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot");
        sm.export().expect("export").2
    };
    // Turn it into layout 1: the snapshot record in sled, no file.
    let file = dir.path().join("raft-snapshot");
    let body = std::fs::read(&file).expect("snapshot file")[20..].to_vec();
    std::fs::remove_file(&file).expect("remove the file");
    {
        let db = sled::open(dir.path()).expect("reopen raw");
        db.open_tree("sm_snapshot").unwrap().insert(b"current", body).unwrap();
        db.open_tree("mooncake_meta").unwrap().insert(b"schema_version", &1u32.to_le_bytes()).unwrap();
        db.flush().unwrap();
    }
    let (_log, mut sm) = open_store(&StoreOptions::new(dir.path())).expect("open a layout-1 dir");
    let (_, applied, hash_after) = sm.export().expect("export");
    assert_eq!((applied, hash_after), (7, hash), "the state of the layout-1 snapshot");
    sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot");
    assert!(file.exists(), "the new snapshot is in the file");
    drop(sm);
    drop(_log);
    let db = sled::open(dir.path()).expect("reopen raw");
    assert_eq!(db.open_tree("sm_snapshot").unwrap().get(b"current").unwrap(), None, "the old record is gone");
    assert_eq!(
        db.open_tree("mooncake_meta").unwrap().get(b"schema_version").unwrap().map(|v| v.to_vec()),
        Some(2u32.to_le_bytes().to_vec())
    );
}
