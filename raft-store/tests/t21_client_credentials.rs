//! A client may mount, unmount and remount only as itself: the rules of the
//! credentials the segment commands carry (`MountSegment`, `UnmountSegment`,
//! `RemountSegments`). The first credential to register a client id holds
//! it (every registered client has one); any other is refused with
//! `PermissionDenied` and changes nothing, until the registration is expired
//! or evicted. Apply stays deterministic: the hash arrives in the command.

mod common;

use common::*;

use mooncake_raft_store::{Command, CredentialHash, MetaError, MetaState, SegmentSpec};
use mooncake_segment::{ClientId, SegmentId};

const OWNER: CredentialHash = CredentialHash([1; 32]);
const INTRUDER: CredentialHash = CredentialHash([2; 32]);

fn mount_as(client: ClientId, credential: CredentialHash, spec: SegmentSpec) -> Command {
    Command::MountSegment { client, credential, segment: spec }
}

fn remount_as(client: ClientId, credential: CredentialHash, segments: Vec<SegmentSpec>) -> Command {
    Command::RemountSegments { client, credential, segments }
}

fn unmount_as(client: ClientId, credential: CredentialHash, segment: u64) -> Command {
    Command::UnmountSegment { client, credential, segment: SegmentId(segment) }
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
    // An object on the node's segment, to see that refusals keep it.
    let v = put_complete(&mut s, W1, "k", 100, 1);
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
    assert_eq!(s.object("k").map(|o| o.version), Some(v), "the node's object is untouched");
    assert_eq!(s.client_credential(NODE_A), Some(&OWNER));
    assert_eq!(s.client_credential(NODE_B), Some(&INTRUDER), "its own id is its own");
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
fn an_unmount_registers_nobody_and_binds_no_credential() {
    let mut s = owned_node();
    ok(&mut s, unmount_as(NODE_B, INTRUDER, 99));
    assert!(s.client(NODE_B).is_none());
    assert_eq!(s.client_credential(NODE_B), None, "an unmount binds nothing");
    ok(&mut s, mount_as(NODE_B, OWNER, segment(2, 1 << 20, "host-b")));
    assert_eq!(s.client_credential(NODE_B), Some(&OWNER), "the id was still free");
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
