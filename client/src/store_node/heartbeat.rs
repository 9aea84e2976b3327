//! The client heartbeat: `Ping` the leader every interval, and keep a store
//! node's segment known to the masters.
//!
//! The Ping answer says whether the master knows the *client*
//! (NEED_REMOUNT when it does not, e.g. it expired while partitioned), but
//! not whether it still knows the client's *segment*: an operator's
//! UnmountSegment, or a segment dropped while the registration survived,
//! leaves a node that pings OK while its capacity is gone. So a store node
//! also checks its segment in the leader's client listing (ListClients, a
//! linearizable read): at once on NEED_REMOUNT, and every
//! [`SEGMENT_CHECK_EVERY_PINGS`] pings while the master's view (the Ping's
//! `view_version`, its applied log index) has moved since the last check
//! that found the segment. An idle cluster therefore costs no checks.
//!
//! A segment found gone is renewed ([`LocalSegment::renew`]: same memory, new
//! id) and remounted; the node reports itself unmounted
//! ([`LocalSegment::is_mounted`]) until the remount succeeds. The decisions
//! are [`SegmentWatch`], a pure state machine tested without sockets.
//!
//! Every call as the client id carries this process's credential. When the
//! masters refuse it (PERMISSION_DENIED: another process registered the id,
//! e.g. this node restarted without its `--credential-file`), the heartbeat
//! says so once ([`HeldId`]) and keeps pinging at its pace: the other
//! registration no longer hears from anyone, so it expires after client_ttl
//! (or an admin evicts it), the Ping answers NEED_REMOUNT, and the node
//! registers. A segment the masters never knew is then mounted as it is;
//! one they knew and dropped is renewed first, as above.
//!
//! A store node with a disk (docs/TIERS.md) mounts both segments in one
//! call, hands the copies a Ping answer brings to its [`Copier`] (which
//! also asks for them itself: [`Copier::take_copies`]), and
//! reports the disk ranges its transfer server or its start-up scrub found
//! corrupt (`ReportCorrupt`) after each Ping.

use std::sync::Arc;
use std::time::Duration;

use mooncake_proto::ErrorCode;
use mooncake_proto::master::{CopyTask, Segment};
use tokio::sync::watch;

use super::StoreNode;
use super::copier::Copier;
use super::local_segment::LocalSegment;
use crate::error::ClientError;
use crate::master_client::{MasterClient, MasterError};

/// Pings between two checks of the segment while the master's view moves:
/// 10 s at the default 1 s heartbeat. A check is one linearizable read on the
/// leader that lists every client, so with 100 store nodes on a busy cluster
/// this costs the leader 10 such reads a second; a forgotten segment is back
/// within this many pings (at once after NEED_REMOUNT).
pub const SEGMENT_CHECK_EVERY_PINGS: u32 = 10;

/// What one Ping said about this client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PingAnswer {
    /// The master knows the client; `view` is its applied log index.
    Known { view: u64 },
    /// NEED_REMOUNT: the master does not know the client.
    Unknown,
    /// PERMISSION_DENIED: another process (another credential) holds the
    /// client id; nothing was refreshed.
    HeldByAnother,
}

/// What a check of the segment found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckOutcome {
    /// The leader lists the segment under this client.
    Present,
    /// The segment was gone and is mounted again (under a new id).
    Remounted,
    /// The check failed (nothing changed); check again at the next ping.
    Failed,
    /// The segment was renewed but its remount failed: remount that one at
    /// the next ping (the masters never knew it, so no renewing again).
    RemountPending,
}

/// What to do after a Ping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Nothing,
    /// Look for the segment in the leader's listing (remount it if gone).
    Check,
    /// Retry the remount of the renewed segment.
    Remount,
}

/// When to check the segment; see the module doc.
#[derive(Debug)]
pub(crate) struct SegmentWatch {
    every_pings: u32,
    pings_since_check: u32,
    /// The view at which the segment was last found present; a Ping with the
    /// same view means nothing changed since.
    confirmed_view: Option<u64>,
    /// The last check failed: check again at the next ping.
    retry: bool,
    /// A renewed segment waits for its remount.
    remount_pending: bool,
}

impl SegmentWatch {
    pub(crate) fn new(every_pings: u32) -> Self {
        Self {
            every_pings: every_pings.max(1),
            pings_since_check: 0,
            confirmed_view: None,
            retry: false,
            remount_pending: false,
        }
    }

    /// The segment was never mounted (its first registration was refused):
    /// mount it as it is at the next ping that is not refused.
    pub(crate) fn never_mounted(mut self) -> Self {
        self.remount_pending = true;
        self
    }

    /// What to do after a Ping that answered `answer`.
    pub(crate) fn after_ping(&mut self, answer: PingAnswer) -> Next {
        self.pings_since_check = self.pings_since_check.saturating_add(1);
        if self.remount_pending && answer != PingAnswer::HeldByAnother {
            return Next::Remount;
        }
        let check = match answer {
            // Nothing to do until the other registration is gone.
            PingAnswer::HeldByAnother => false,
            PingAnswer::Unknown => true,
            _ if self.retry => true,
            PingAnswer::Known { view } if Some(view) == self.confirmed_view => false,
            PingAnswer::Known { .. } => self.pings_since_check >= self.every_pings,
        };
        if check { Next::Check } else { Next::Nothing }
    }

    /// Records a check (or remount) made after a Ping that answered `answer`.
    pub(crate) fn checked(&mut self, answer: PingAnswer, outcome: CheckOutcome) {
        self.pings_since_check = 0;
        self.retry = outcome == CheckOutcome::Failed;
        self.remount_pending = outcome == CheckOutcome::RemountPending;
        self.confirmed_view = match (outcome, answer) {
            (CheckOutcome::Present, PingAnswer::Known { view }) => Some(view),
            // After a remount (our own write) or a failure, the next due
            // check must look again.
            _ => None,
        };
    }
}

/// Whether another process holds this client id, so that the heartbeat
/// says so once per episode rather than at every ping.
#[derive(Debug, Default)]
pub(crate) struct HeldId {
    said: bool,
}

impl HeldId {
    /// The masters refused this process's credential for `client_id`: logs
    /// the one line of this episode (and, for a store node, why it serves
    /// nothing).
    pub(crate) fn refused(&mut self, client_id: u64, local: Option<&LocalSegment>) {
        let why = held_by_another(client_id);
        if let Some(local) = local {
            local.set_unmounted(why.clone());
        }
        if !self.said {
            tracing::warn!(client = format!("{client_id:016x}"), "{why}");
            self.said = true;
        }
    }

    /// The masters accept the credential again.
    fn accepted(&mut self, client_id: u64) {
        if std::mem::take(&mut self.said) {
            tracing::info!(
                client = format!("{client_id:016x}"),
                "client id {client_id} is free again (the other registration expired or was evicted); registering"
            );
        }
    }
}

/// What a process whose client id another credential holds is told.
pub(crate) fn held_by_another(client_id: u64) -> String {
    format!(
        "client id {client_id} is registered by another process; waiting for it to expire (client_ttl) or for an \
         admin to evict it (a store node keeps its identity across restarts with --credential-file)"
    )
}

/// Registers `client_id` with its exact set of segments (none for a plain
/// client) at once: a restarted process with the same identity replaces its
/// stale segments now instead of waiting for its old registration to
/// expire. Unless that registration is another process's (another
/// credential): then the answer is [`HeldId::refused`], and [`run`] waits
/// for it to expire and registers.
pub(crate) async fn register(
    master: &MasterClient,
    client_id: u64,
    node: Option<&StoreNode>,
) -> Result<HeldId, ClientError> {
    let local = node.map(StoreNode::segment);
    let mut held = HeldId::default();
    let tenant = local.and_then(LocalSegment::tenant);
    if let Some(local) = local.filter(|l| l.is_reattaching()) {
        match master.reattach_segments(client_id, local.specs(), tenant).await {
            Ok(keys) => {
                local.install_keys(&keys)?;
                local.reattach_settled();
                tracing::info!(
                    client = format!("{client_id:016x}"),
                    segment = format!("{:016x}", local.spec().id),
                    "re-attached the segment a previous store node of this client id served: its objects stay"
                );
                return Ok(held);
            }
            Err(e) if e.code() == Some(ErrorCode::SegmentNotFound) => {
                local.renew()?;
                tracing::warn!(client = format!("{client_id:016x}"), error = %e,
                    "the masters forgot the segment a previous store node served; its objects are gone: mounting \
                     its memory as a new, empty segment");
            }
            Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => {
                held.refused(client_id, Some(local));
                return Ok(held);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let segments = local.iter().flat_map(|l| l.specs()).collect();
    match master.remount_segments_for(client_id, segments, tenant).await {
        Ok(keys) => {
            if let Some(local) = local {
                local.install_keys(&keys)?;
            }
        }
        Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => held.refused(client_id, local),
        Err(e) => return Err(e.into()),
    }
    Ok(held)
}

/// The heartbeat of one client, and for a store node its copier's own
/// asking for copies ([`Copier::take_copies`]); returns when `stop`
/// changes. `held` is what [`register`] answered.
pub(crate) async fn run(
    master: Arc<MasterClient>,
    client_id: u64,
    node: Option<StoreNode>,
    interval: Duration,
    held: HeldId,
    stop: watch::Receiver<bool>,
) {
    let local = node.as_ref().map(|n| n.local().clone());
    let copier = node.as_ref().map(|n| n.copier().clone());
    let beat = beat(master, client_id, local, copier.clone(), interval, held, stop.clone());
    match copier {
        Some(copier) => {
            tokio::join!(beat, copier.take_copies(interval, stop));
        }
        None => beat.await,
    }
}

/// Pings every `interval` and, for a store node (`local`), keeps its segment
/// mounted; returns when `stop` changes. `held` is [`HeldId::refused`]
/// already when the client's first registration was refused (its segment,
/// if any, then waits to be mounted).
async fn beat(
    master: Arc<MasterClient>,
    client_id: u64,
    local: Option<Arc<LocalSegment>>,
    copier: Option<Arc<Copier>>,
    interval: Duration,
    mut held: HeldId,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut segment_watch = SegmentWatch::new(SEGMENT_CHECK_EVERY_PINGS);
    if held.said {
        segment_watch = segment_watch.never_mounted();
    }
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let answer = match ping(&master, client_id, local.as_deref()).await {
            Ok((PingAnswer::HeldByAnother, _)) => {
                held.refused(client_id, local.as_deref());
                continue;
            }
            Ok((answer, copies)) => {
                if let Some(copier) = &copier
                    && !copies.is_empty()
                {
                    copier.start(copies);
                }
                if let Some(local) = &local {
                    report_corrupt(&master, client_id, local).await;
                }
                answer
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed; will retry");
                continue;
            }
        };
        held.accepted(client_id);
        match &local {
            Some(local) => {
                let outcome = match segment_watch.after_ping(answer) {
                    Next::Nothing => continue,
                    Next::Check => check_segment(&master, client_id, local, answer).await,
                    Next::Remount => remount_renewed(&master, client_id, local).await,
                };
                segment_watch.checked(answer, outcome);
            }
            None if answer == PingAnswer::Unknown => {
                // A client without a segment only needs its registration back.
                match master.remount_segments(client_id, Vec::new()).await {
                    Ok(_) => {}
                    Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => held.refused(client_id, None),
                    Err(e) => tracing::warn!(error = %e, "re-registering failed; will retry"),
                }
            }
            None => {}
        }
    }
}

/// Reports the disk ranges found corrupt since the last Ping (kept for the
/// next one if the report fails).
async fn report_corrupt(master: &MasterClient, client_id: u64, local: &LocalSegment) {
    let found = local.registry().take_corrupt();
    if found.is_empty() {
        return;
    }
    let mut segments: Vec<u64> = found.iter().map(|(s, _, _)| s.0).collect();
    segments.sort_unstable();
    segments.dedup();
    for segment in segments {
        let ranges: Vec<(u64, u64)> =
            found.iter().filter(|(s, _, _)| s.0 == segment).map(|(_, offset, len)| (*offset, *len)).collect();
        match master.report_corrupt(client_id, segment, ranges.clone()).await {
            Ok(dropped) => tracing::warn!(
                segment = format!("{segment:016x}"),
                ranges = ranges.len(),
                dropped,
                "reported corrupt disk ranges; the masters dropped the replicas on them"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "reporting corrupt disk ranges failed; will retry");
                for (offset, len) in ranges {
                    local.registry().note_corrupt(mooncake_segment::SegmentId(segment), offset, len);
                }
            }
        }
    }
}

/// Ping, with the view version the bool-returning `MasterClient::ping`
/// drops, and the copies the leader asks of this node. A store node also
/// says which arena fences it enforces and installs the newer ones the
/// answer brings (`mooncake_transfer::fence`).
async fn ping(
    master: &MasterClient,
    client_id: u64,
    local: Option<&LocalSegment>,
) -> Result<(PingAnswer, Vec<CopyTask>), MasterError> {
    let acks = local.map(LocalSegment::fence_acks).unwrap_or_default();
    match master.ping_store_node(client_id, acks).await {
        Ok(reply) => {
            if let Some(local) = local {
                local.install_fences(&reply.fences);
            }
            Ok((PingAnswer::Known { view: reply.view_version }, reply.copy_tasks))
        }
        Err(e) if e.code() == Some(ErrorCode::NeedRemount) => Ok((PingAnswer::Unknown, Vec::new())),
        Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => Ok((PingAnswer::HeldByAnother, Vec::new())),
        Err(e) => Err(e),
    }
}

/// Looks for the segment in the leader's listing and, if it is gone, renews
/// and remounts it.
async fn check_segment(
    master: &MasterClient,
    client_id: u64,
    local: &LocalSegment,
    answer: PingAnswer,
) -> CheckOutcome {
    let client = format!("{client_id:016x}");
    let spec = local.spec();
    let disk = local.disk_spec();
    let (memory_known, disk_known) = match master.list_clients().await {
        Ok(clients) => {
            let listed = clients.iter().find(|c| c.id == client_id).map(|c| c.segments.clone()).unwrap_or_default();
            (listed.contains(&spec.id), disk.as_ref().is_none_or(|d| listed.contains(&d.id)))
        }
        Err(e) if answer == PingAnswer::Unknown => {
            // Without the listing, do what NEED_REMOUNT asks with the same
            // segments: a master that still knows them keeps them as they are.
            tracing::warn!(%client, error = %e, "cannot list clients; remounting the same segments");
            return match remount(master, client_id, local, local.specs()).await {
                Ok(()) => {
                    tracing::info!(%client, "master asked for a remount; segment remounted");
                    local.set_mounted(false);
                    CheckOutcome::Remounted
                }
                Err(_) => CheckOutcome::Failed,
            };
        }
        Err(e) => {
            tracing::warn!(%client, error = %e, "cannot check that the masters know this node's segment; will retry");
            return CheckOutcome::Failed;
        }
    };
    if memory_known && disk_known {
        return CheckOutcome::Present;
    }
    local.set_unmounted("the masters no longer know this node's segments; remounting them".to_owned());
    if !memory_known {
        tracing::warn!(%client, segment = format!("{:016x}", spec.id),
            "the masters no longer know this node's memory segment (it expired, or was unmounted by an \
             operator); its objects are gone: remounting its memory as a new segment");
        if let Err(e) = local.renew() {
            tracing::error!(%client, error = %e, "cannot renew the segment for a remount; will retry");
            local.set_unmounted(format!("cannot renew the segment for a remount: {e}"));
            return CheckOutcome::Failed;
        }
    }
    if !disk_known {
        tracing::warn!(%client, segment = format!("{:016x}", disk.as_ref().map_or(0, |d| d.id)),
            "the masters no longer know this node's disk segment (its grace ended, or an operator unmounted \
             it); the objects on it are gone: remounting the disk as a new, empty segment");
        if let Err(e) = local.renew_disk() {
            tracing::error!(%client, error = %e, "cannot renew the disk segment for a remount; will retry");
            local.set_unmounted(format!("cannot renew the disk segment for a remount: {e}"));
            return CheckOutcome::Failed;
        }
    }
    remount_renewed(master, client_id, local).await
}

/// Mounts the renewed segment; the node serves nothing until this succeeds.
async fn remount_renewed(master: &MasterClient, client_id: u64, local: &LocalSegment) -> CheckOutcome {
    let segment = format!("{:016x}", local.spec().id);
    match remount(master, client_id, local, local.specs()).await {
        Ok(()) => {
            tracing::warn!(client = format!("{client_id:016x}"), %segment,
                "segment remounted; the node serves its full capacity again");
            local.set_mounted(true);
            CheckOutcome::Remounted
        }
        Err(e) => {
            local.set_unmounted(format!("remount of segment {segment} failed (retrying every heartbeat): {e}"));
            CheckOutcome::RemountPending
        }
    }
}

/// Registers this client with exactly `specs` and hands the segments'
/// capability keys from the answer to the transfer server; logs a failure.
async fn remount(
    master: &MasterClient,
    client_id: u64,
    local: &LocalSegment,
    specs: Vec<Segment>,
) -> Result<(), ClientError> {
    let segment = format!("{:016x}", specs.first().map_or(0, |s| s.id));
    let result = match master.remount_segments_for(client_id, specs, local.tenant()).await {
        Ok(keys) => local.install_keys(&keys),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = &result {
        tracing::error!(client = format!("{client_id:016x}"), %segment, error = %e,
            "remount failed; will retry at the next heartbeat");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: u32 = 3;

    fn known(view: u64) -> PingAnswer {
        PingAnswer::Known { view }
    }

    #[test]
    fn a_moving_view_is_checked_every_few_pings_and_a_still_one_never() {
        let mut w = SegmentWatch::new(EVERY);
        let due: Vec<Next> = (1..=EVERY as u64).map(|v| w.after_ping(known(v))).collect();
        assert_eq!(due, [Next::Nothing, Next::Nothing, Next::Check], "the first check after {EVERY} pings");
        w.checked(known(3), CheckOutcome::Present);
        // Nothing was applied since the check: the segment is still there.
        for _ in 0..10 * EVERY {
            assert_eq!(w.after_ping(known(3)), Next::Nothing);
        }
        // The view moved: checked once the pings add up (they already do).
        assert_eq!(w.after_ping(known(4)), Next::Check);
    }

    #[test]
    fn need_remount_is_checked_at_once() {
        let mut w = SegmentWatch::new(EVERY);
        w.checked(known(7), CheckOutcome::Present);
        assert_eq!(w.after_ping(PingAnswer::Unknown), Next::Check);
    }

    #[test]
    fn a_failed_check_is_retried_at_the_next_ping_even_on_a_still_view() {
        let mut w = SegmentWatch::new(EVERY);
        w.checked(known(7), CheckOutcome::Failed);
        assert_eq!(w.after_ping(known(8)), Next::Check);
        w.checked(known(8), CheckOutcome::Present);
        assert_eq!(w.after_ping(known(8)), Next::Nothing);
    }

    #[test]
    fn a_failed_remount_of_a_renewed_segment_is_retried_without_renewing_again() {
        let mut w = SegmentWatch::new(EVERY);
        w.checked(known(5), CheckOutcome::RemountPending);
        assert_eq!(w.after_ping(known(5)), Next::Remount);
        assert_eq!(w.after_ping(PingAnswer::Unknown), Next::Remount, "even on NEED_REMOUNT");
        w.checked(known(6), CheckOutcome::Remounted);
        assert_ne!(w.after_ping(known(6)), Next::Remount);
    }

    #[test]
    fn a_segment_whose_first_registration_was_refused_is_mounted_once_the_id_is_free() {
        let mut w = SegmentWatch::new(EVERY).never_mounted();
        for _ in 0..3 * EVERY {
            assert_eq!(w.after_ping(PingAnswer::HeldByAnother), Next::Nothing, "nothing while another holds the id");
        }
        // The other registration expired: mount the segment as it is (the
        // masters never knew it, so no renewing).
        assert_eq!(w.after_ping(PingAnswer::Unknown), Next::Remount);
        w.checked(PingAnswer::Unknown, CheckOutcome::Remounted);
        assert_eq!(w.after_ping(known(4)), Next::Nothing);
    }

    #[test]
    fn a_mounted_segment_whose_id_another_process_took_is_checked_once_the_id_is_free() {
        let mut w = SegmentWatch::new(EVERY);
        w.checked(known(3), CheckOutcome::Present);
        assert_eq!(w.after_ping(PingAnswer::HeldByAnother), Next::Nothing);
        // Evicted, then held by another, then free: its segment was dropped,
        // so it is checked (and renewed before its remount).
        assert_eq!(w.after_ping(PingAnswer::Unknown), Next::Check);
    }

    #[test]
    fn after_a_remount_the_next_due_check_looks_again() {
        let mut w = SegmentWatch::new(EVERY);
        w.checked(PingAnswer::Unknown, CheckOutcome::Remounted);
        let due: Vec<Next> = (0..EVERY).map(|_| w.after_ping(known(9))).collect();
        assert_eq!(due, [Next::Nothing, Next::Nothing, Next::Check], "a remount confirms nothing by itself");
    }
}
