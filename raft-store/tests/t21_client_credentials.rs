//! A client may mount, unmount and remount only as itself: the rules of the
//! credential-carrying commands (`MountSegmentAs`, `UnmountSegmentAs`,
//! `RemountSegmentsAs`). The first credential to register a client id holds
//! it; any other is refused with `PermissionDenied` and changes nothing,
//! until the registration is expired or evicted. A client an older log
//! registered without a credential adopts the first one it mounts with.
//! Apply stays deterministic: the hash arrives in the command.

mod common;

use common::*;

use mooncake_raft_store::{Command, CredentialHash, MetaError, MetaState, SegmentSpec};
use mooncake_segment::{ClientId, SegmentId};

const OWNER: CredentialHash = CredentialHash([1; 32]);
const INTRUDER: CredentialHash = CredentialHash([2; 32]);

fn mount_as(client: ClientId, credential: CredentialHash, spec: SegmentSpec) -> Command {
    Command::MountSegmentAs { client, credential, segment: spec }
}

fn remount_as(client: ClientId, credential: CredentialHash, segments: Vec<SegmentSpec>) -> Command {
    Command::RemountSegmentsAs { client, credential, segments }
}

fn unmount_as(client: ClientId, credential: CredentialHash, segment: u64) -> Command {
    Command::UnmountSegmentAs { client, credential, segment: SegmentId(segment) }
}

fn denied(e: MetaError) {
    assert!(matches!(e, MetaError::PermissionDenied(_)), "{e:?}");
    assert!(e.to_string().contains("client_ttl"), "the message says what to wait for: {e}");
}

/// A store node registered with its credential.
fn owned_node() -> MetaState {
    let mut s = MetaState::default();
    ok(&mut s, mount_as(NODE_A, OWNER, segment(1, 1 << 20, "host-a")));
    s
}

#[test]
fn the_first_credential_registers_the_client_and_its_own_calls_work() {
    let mut s = owned_node();
    assert_eq!(s.client_credential(NODE_A), Some(&OWNER));
    assert!(s.check_credential(NODE_A, &OWNER).is_ok());
    assert!(s.check_credential(NODE_B, &INTRUDER).is_ok(), "an unknown id is free");
    // A retried mount, a remount with a new segment set, an unmount: as today.
    ok(&mut s, mount_as(NODE_A, OWNER, segment(1, 1 << 20, "host-a")));
    ok(&mut s, remount_as(NODE_A, OWNER, vec![segment(2, 1 << 20, "host-a")]));
    assert!(s.segment(SegmentId(1)).is_none() && s.segment(SegmentId(2)).is_some());
    ok(&mut s, unmount_as(NODE_A, OWNER, 2));
    assert!(s.segment(SegmentId(2)).is_none());
    assert_eq!(s.client_credential(NODE_A), Some(&OWNER), "unmount keeps the registration");
}

#[test]
fn another_credential_can_neither_mount_remount_nor_unmount_as_the_client() {
    let mut s = owned_node();
    put_complete_one(&mut s);
    // The probe that would leak the segment's key: a remount of the node's
    // own segment under its id.
    denied(refused(&mut s, remount_as(NODE_A, INTRUDER, vec![segment(1, 1 << 20, "host-a")])));
    denied(refused(&mut s, remount_as(NODE_A, INTRUDER, vec![])));
    denied(refused(&mut s, mount_as(NODE_A, INTRUDER, segment(1, 1 << 20, "host-a"))));
    denied(refused(&mut s, mount_as(NODE_A, INTRUDER, segment(9, 1 << 20, "host-x"))));
    denied(refused(&mut s, unmount_as(NODE_A, INTRUDER, 1)));
    // Inside a batch too, and the rest of the batch still applies.
    let batch =
        Command::Batch(vec![unmount_as(NODE_A, INTRUDER, 1), mount_as(NODE_B, INTRUDER, segment(3, 1 << 20, "b"))]);
    match apply(&mut s, batch) {
        mooncake_raft_store::Response::Batch(answers) => {
            assert!(matches!(answers[0].err(), Some(MetaError::PermissionDenied(_))), "{answers:?}");
            assert_eq!(answers[1], mooncake_raft_store::Response::Ok);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.segment(SegmentId(1)).map(|g| g.owner), Some(NODE_A));
    assert!(s.object("k").is_some(), "the node's object is untouched");
    assert_eq!(s.client_credential(NODE_A), Some(&OWNER));
    assert_eq!(s.client_credential(NODE_B), Some(&INTRUDER), "its own id is its own");
}

/// An object on the node's segment, to see that refusals keep it.
fn put_complete_one(s: &mut MetaState) {
    let r = apply(
        s,
        Command::PutStart(mooncake_raft_store::PutStart {
            client: W1,
            key: "k".into(),
            size_bytes: 100,
            replica_num: 1,
            preferred: vec![],
            pin: mooncake_raft_store::Pin::None,
        }),
    );
    assert!(r.err().is_none(), "{r:?}");
    ok(s, Command::PutEnd { client: W1, key: "k".into(), checksum: 1 });
}

#[test]
fn expiry_or_eviction_frees_the_id_for_a_new_credential() {
    let mut s = owned_node();
    ok(&mut s, Command::ExpireClient { client: NODE_A });
    assert_eq!(s.client_credential(NODE_A), None);
    ok(&mut s, remount_as(NODE_A, INTRUDER, vec![segment(1, 1 << 20, "host-a")]));
    assert_eq!(s.client_credential(NODE_A), Some(&INTRUDER), "the restarted process holds the id now");
    denied(refused(&mut s, remount_as(NODE_A, OWNER, vec![])));
}

#[test]
fn a_client_an_older_log_registered_adopts_the_first_credential_it_mounts_with() {
    let mut s = MetaState::default();
    // Legacy commands (replayed from an older log) register without one.
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    ok(&mut s, Command::RemountSegments { client: W1, segments: vec![] });
    assert_eq!(s.client_credential(NODE_A), None);
    // Until it adopts one, any credential may act as it (as before).
    ok(&mut s, unmount_as(NODE_A, INTRUDER, 99));
    assert_eq!(s.client_credential(NODE_A), None, "an unmount binds nothing");
    ok(&mut s, remount_as(NODE_A, OWNER, vec![segment(1, 1 << 20, "host-a")]));
    assert_eq!(s.client_credential(NODE_A), Some(&OWNER));
    denied(refused(&mut s, mount_as(NODE_A, INTRUDER, segment(2, 1 << 20, "host-a"))));
    // A legacy command keeps the credential a client holds.
    ok(&mut s, Command::RemountSegments { client: NODE_A, segments: vec![segment(1, 1 << 20, "host-a")] });
    assert_eq!(s.client_credential(NODE_A), Some(&OWNER));
}

#[test]
fn a_refused_mount_binds_no_credential() {
    let mut s = MetaState::default();
    let e = refused(&mut s, mount_as(NODE_A, OWNER, segment(0, 1 << 20, "host-a")));
    assert!(is_invalid(&e), "{e:?}");
    assert_eq!(s.client_credential(NODE_A), None);
    assert!(s.client(NODE_A).is_none());
}

#[test]
fn credentials_survive_a_snapshot_image_and_count_in_the_state_hash() {
    let s = owned_node();
    let restored = MetaState::from_image(s.to_image()).expect("image");
    assert_eq!(restored.client_credential(NODE_A), Some(&OWNER));
    assert_eq!(restored.state_hash(), s.state_hash());
    let mut other = MetaState::default();
    other.apply(&mooncake_raft_store::Request {
        ts_ms: s.now_ms(),
        cmd: mount_as(NODE_A, INTRUDER, segment(1, 1 << 20, "host-a")),
    });
    assert_ne!(other.state_hash(), s.state_hash(), "replicas that bound different credentials hash apart");
    s.check_invariants().expect("consistent");
}
