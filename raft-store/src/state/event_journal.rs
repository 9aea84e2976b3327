//! Turning the changes apply makes to the objects into object events
//! (`crate::events`): after each command (a batch's, one by one), the
//! index's noted changes ([`IndexChange`]) get the command's cause and the
//! replicas' tiers and hosts as the state has them then. Recording is off
//! unless asked ([`MetaState::record_events`]): the state machine asks; a
//! state built for a test or a bench records nothing and keeps no journal.

use super::objects::IndexChange;
use super::{MetaState, ObjectMeta};
use crate::command::{Command, RemoveReason};
use crate::events::{Cause, EventReplica, ObjectEvent};

/// Events made since [`MetaState::take_events`] last ran. Not part of the
/// state: a copy (a snapshot's) starts empty.
#[derive(Debug, Default)]
pub(super) struct PendingEvents(Vec<ObjectEvent>);

impl Clone for PendingEvents {
    fn clone(&self) -> Self {
        PendingEvents::default()
    }
}

/// Why `cmd` changes objects: the cause of what it removes and of the
/// replica lists it changes (its puts are [`Cause::Put`]).
fn cause_of(cmd: &Command) -> Cause {
    match cmd {
        Command::PutCommit(_) | Command::PutCommitInQuota(_) => Cause::Upsert,
        Command::RemoveVersion { .. } | Command::RemoveObjects { reason: RemoveReason::RemoveAll, .. } => Cause::Remove,
        Command::RemoveObjects { reason: RemoveReason::Evict, .. }
        | Command::DropTierReplicas { .. }
        | Command::DropReplica { .. } => Cause::Evict,
        Command::ExpireClient { .. } | Command::ExpireClientKeepDisk { .. } => Cause::Expiry,
        Command::MountSegment { .. }
        | Command::MountTenantSegment { .. }
        | Command::UnmountSegment { .. }
        | Command::RemountSegments { .. }
        | Command::RemountTenantSegments { .. }
        | Command::ReattachSegments { .. }
        | Command::DropDetached { .. } => Cause::Unmount,
        Command::DropCorrupt { .. } => Cause::Corrupt,
        Command::AddReplica { .. } => Cause::Copy,
        // These change no object (a batch's commands are noted one by one).
        Command::Batch(_)
        | Command::Once { .. }
        | Command::Noop
        | Command::ArenaGrant { .. }
        | Command::ArenaTrim { .. }
        | Command::ArenaReturn { .. }
        | Command::ReleaseRetired { .. }
        | Command::ArenaCut { .. }
        | Command::SetTenantQuota { .. } => Cause::Remove,
    }
}

impl MetaState {
    /// Turns the recording of object events on or off.
    pub fn record_events(&mut self, on: bool) {
        self.objects.record(on);
    }

    /// The object events made since the last call, in apply order.
    pub fn take_events(&mut self) -> Vec<ObjectEvent> {
        std::mem::take(&mut self.events.0)
    }

    /// Turns what `cmd` (a single command, not a batch) changed into events.
    pub(super) fn note_events(&mut self, cmd: &Command) {
        let changes = self.objects.take_changes();
        if changes.is_empty() {
            return;
        }
        let cause = cause_of(cmd);
        for change in changes {
            let event = match change {
                IndexChange::Stored(o) => ObjectEvent::Stored {
                    key: o.key.clone(),
                    version: o.version,
                    size_bytes: o.size_bytes,
                    replicas: self.event_replicas(&o),
                },
                IndexChange::Removed { key, version } => ObjectEvent::Removed { key, version, cause },
                // An object left with no replica is removed next: that says it.
                IndexChange::Replicas(o) if o.replicas.is_empty() => continue,
                IndexChange::Replicas(o) => ObjectEvent::Replicas {
                    key: o.key.clone(),
                    version: o.version,
                    replicas: self.event_replicas(&o),
                    cause,
                },
            };
            self.events.0.push(event);
        }
    }

    fn event_replicas(&self, o: &ObjectMeta) -> Vec<EventReplica> {
        o.replicas
            .iter()
            .filter_map(|r| {
                let seg = self.segments.get(&r.segment)?;
                Some(EventReplica {
                    segment: r.segment,
                    tier: seg.tier(),
                    host: seg.spec.host_id.clone(),
                    zone: seg.spec.zone.clone(),
                })
            })
            .collect()
    }
}
