//! `apply`: the one entry point that changes the state. It stamps time
//! from the request, advances the request clock, and dispatches each
//! [`Command`] to the module that owns it; `Batch` and `Once` (request
//! deduplication) are handled here. Refusals are answers
//! ([`Response::Err`]); a broken invariant ends the process.

use super::MetaState;
use super::invariants::InvariantViolation;
use super::validation::{BATCH_MAX, invalid};
use crate::command::{Command, Request, Response};
use crate::error::MetaError;
use crate::fatal;

/// The outcome of a command that broke no invariant: its answer.
pub(super) type Applied = Result<Response, InvariantViolation>;

/// Why a command stopped: refused (its answer), or it found the state
/// broken (the node must stop).
pub(super) enum Stop {
    Refused(MetaError),
    Broken(InvariantViolation),
}

impl From<MetaError> for Stop {
    fn from(e: MetaError) -> Stop {
        Stop::Refused(e)
    }
}

impl From<InvariantViolation> for Stop {
    fn from(v: InvariantViolation) -> Stop {
        Stop::Broken(v)
    }
}

/// The answer of a command that stopped or finished.
pub(super) fn answer(result: Result<(), Stop>) -> Applied {
    match result {
        Ok(()) => Ok(Response::Ok),
        Err(Stop::Refused(e)) => Ok(Response::Err(e)),
        Err(Stop::Broken(v)) => Err(v),
    }
}

impl MetaState {
    /// Applies one request. Never fails as a whole: refusals are responses.
    /// A broken invariant ends the process (`fatal::invariant_broken`): a
    /// restart rebuilds the state from the last snapshot and the log.
    pub fn apply(&mut self, req: &Request) -> Response {
        match self.try_apply(req) {
            Ok(response) => response,
            Err(broken) => {
                let at = self.last_applied.map(|l| format!(" (applying log index {})", l.index)).unwrap_or_default();
                fatal::invariant_broken(&format!("{broken}{at}"))
            }
        }
    }

    /// [`apply`](Self::apply), returning a broken invariant instead of
    /// ending the process; the state is then unusable. Debug builds also
    /// run [`check_invariants`](Self::check_invariants) after the request
    /// (after every one on states of up to
    /// [`SCAN_EVERY_ENTRY_RECORDS_MAX`](super::SCAN_EVERY_ENTRY_RECORDS_MAX) records,
    /// amortised on larger ones; see `invariants.rs`).
    pub fn try_apply(&mut self, req: &Request) -> Result<Response, InvariantViolation> {
        self.now_ms = self.now_ms.max(req.ts_ms);
        self.requests.tick(req.ts_ms);
        let response = self.apply_cmd(&req.cmd)?;
        #[cfg(debug_assertions)]
        self.scan_if_due()?;
        Ok(response)
    }

    /// Applies `cmd`, then notes the object events of a single command
    /// (a batch's are noted one by one, as they apply).
    pub(super) fn apply_cmd(&mut self, cmd: &Command) -> Applied {
        let applied = self.dispatch(cmd);
        if !matches!(cmd, Command::Batch(_) | Command::Once { .. }) {
            self.note_events(cmd);
        }
        applied
    }

    fn dispatch(&mut self, cmd: &Command) -> Applied {
        let result: Result<(), Stop> = match cmd {
            Command::MountSegment { client, credential, segment } => {
                self.as_client(*client, credential, |s| s.mount(*client, segment, credential, None)).map_err(Stop::from)
            }
            Command::MountTenantSegment { client, credential, segment, tenant } => self
                .as_client(*client, credential, |s| s.mount(*client, segment, credential, Some(tenant)))
                .map_err(Stop::from),
            Command::UnmountSegment { client, credential, segment } => self
                .check_credential(*client, credential)
                .and_then(|()| self.unmount(*client, *segment))
                .map_err(Stop::from),
            Command::RemountSegments { client, credential, segments } => self
                .as_client(*client, credential, |s| s.remount(*client, segments, credential, None))
                .map_err(Stop::from),
            Command::ReattachSegments { client, credential, segments, tenant } => self
                .as_client(*client, credential, |s| s.reattach(*client, segments, credential, tenant.as_deref()))
                .map_err(Stop::from),
            Command::RemountTenantSegments { client, credential, segments, tenant } => self
                .as_client(*client, credential, |s| s.remount(*client, segments, credential, Some(tenant)))
                .map_err(Stop::from),
            Command::RemoveObjects { victims, .. } => return self.remove_objects(victims),
            Command::ExpireClient { client } => self.expire_client(*client, false).map_err(Stop::from),
            Command::Batch(cmds) => return self.apply_batch(cmds),
            Command::Once { request_id, cmd } => return self.apply_once(*request_id, cmd),
            Command::Noop => Ok(()),
            Command::RemoveVersion { key, version } => self.remove_version(key, *version),
            Command::ArenaGrant { segment, len_bytes, unit_bytes, term } => {
                return self.grant_arena(*segment, *len_bytes, *unit_bytes, *term);
            }
            Command::ArenaTrim { arena, keep_bytes } => self.trim_arena(*arena, *keep_bytes).map_err(Stop::from),
            Command::ArenaReturn { arenas } => return Ok(self.return_arenas(arenas)),
            Command::PutCommit(new) => return self.put_commit(new),
            Command::PutCommitInQuota(new) => return self.put_commit_in_quota(new),
            Command::ReleaseRetired { versions } => return self.release_retired(versions),
            Command::AddReplica { key, version, replica } => return self.add_replica(key, *version, replica),
            Command::DropTierReplicas { victims, tier } => return self.drop_tier_replicas(victims, *tier),
            Command::DropReplica { victim, segment } => return self.drop_replica(victim, *segment),
            Command::ExpireClientKeepDisk { client } => self.expire_client(*client, true).map_err(Stop::from),
            Command::DropDetached { segments } => return Ok(self.drop_detached(segments)),
            Command::DropCorrupt { client, credential, segment, ranges } => {
                return self.drop_corrupt(*client, credential, *segment, ranges);
            }
            Command::ArenaCut { arena, ranges } => return Ok(self.cut_arena(*arena, ranges)),
            Command::SetTenantQuota { tenant, bytes } => self.set_tenant_quota(tenant, *bytes).map_err(Stop::from),
        };
        answer(result)
    }

    fn apply_batch(&mut self, cmds: &[Command]) -> Applied {
        if cmds.len() > BATCH_MAX {
            return Ok(Response::Err(invalid(format!("batch of {} commands; the limit is {BATCH_MAX}", cmds.len()))));
        }
        if cmds.iter().any(|c| matches!(c, Command::Batch(_))) {
            return Ok(Response::Err(invalid("nested batch")));
        }
        let answers: Result<Vec<Response>, InvariantViolation> = cmds.iter().map(|c| self.apply_cmd(c)).collect();
        Ok(Response::Batch(answers?))
    }

    /// Applies `cmd` unless `request_id` was applied already, in which case
    /// the first answer is returned and nothing changes.
    fn apply_once(&mut self, request_id: u64, cmd: &Command) -> Applied {
        if matches!(cmd, Command::Batch(_) | Command::Once { .. }) {
            return Ok(Response::Err(invalid("Once wraps a single command")));
        }
        if let Some(answer) = self.requests.answer(request_id) {
            return Ok(answer);
        }
        let answer = self.apply_cmd(cmd)?;
        self.requests.remember(request_id, answer.clone())?;
        Ok(answer)
    }
}
