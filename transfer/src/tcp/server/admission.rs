//! Which connections a [`super::TransferServer`] admits: at most
//! `connections_max` at once in total and `peer_connections_max` from one IP
//! address ([`mooncake_admission::Table`]). A connection waiting for a
//! request (none sent yet, or idle between requests) gives its place to a
//! newcomer rather than the newcomer being refused: silent ones first, then
//! the longest idle, never one serving a request. So idle sockets, however
//! many addresses they come from, cannot keep clients out.
//!
//! A [`Slot`] is one admitted connection: it says when its connection
//! waits and when it serves, learns when it was replaced, and gives its
//! place back when dropped (however its task ends: finished, failed,
//! panicked or aborted at shutdown).

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use mooncake_admission::{Admit, ConnId, Limits, Table};
use tokio::sync::Notify;

pub(crate) use mooncake_admission::Refusal;

/// The admission table shared by the accept loop and the connection tasks.
#[derive(Debug)]
pub(crate) struct Admission {
    table: Mutex<Table>,
    /// Wakes waiting connections to check whether they were replaced.
    evictions: Notify,
}

pub(crate) type SharedAdmission = Arc<Admission>;

impl Admission {
    pub(crate) fn new(total_max: usize, peer_max: usize) -> SharedAdmission {
        Arc::new(Admission { table: Mutex::new(Table::new(Limits { total_max, peer_max })), evictions: Notify::new() })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections holding a place now, and how many of them wait (may be
    /// replaced by a newcomer).
    pub(crate) fn open_and_waiting(&self) -> (usize, usize) {
        let t = self.table();
        (t.open(), t.waiting())
    }
}

/// One admitted connection's place; released on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    admission: SharedAdmission,
    id: ConnId,
}

impl Slot {
    /// Admits a connection from `peer`, replacing a waiting connection if a
    /// limit is reached (that connection is woken to close).
    pub(crate) fn take(admission: &SharedAdmission, peer: IpAddr) -> Result<Slot, Refusal> {
        let admitted = admission.table().admit(peer);
        let id = match admitted {
            Admit::Admitted(id) => id,
            Admit::Replacing { admitted, evicted: _ } => {
                admission.evictions.notify_waiters();
                admitted
            }
            Admit::Refused(refusal) => return Err(refusal),
        };
        Ok(Slot { admission: admission.clone(), id })
    }

    /// The connection got a request: it is not replaced while serving it.
    /// False when it was replaced meanwhile: it must close.
    pub(crate) fn busy(&self) -> bool {
        self.admission.table().busy(self.id)
    }

    /// The connection waits for its next request. False when it was
    /// replaced meanwhile.
    pub(crate) fn idle(&self) -> bool {
        self.admission.table().idle(self.id)
    }

    /// Resolves once this connection was replaced by a newcomer.
    pub(crate) async fn replaced(&self) {
        loop {
            let woken = self.admission.evictions.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.admission.table().is_evicted(self.id) {
                return;
            }
            woken.await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.table().close(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiting_connection_learns_it_was_replaced_and_its_place_is_the_newcomers() {
        let admission = Admission::new(1, 1);
        let peer = IpAddr::from([127, 0, 0, 1]);
        let first = Slot::take(&admission, peer).expect("first");
        assert!(first.busy());
        assert_eq!(Slot::take(&admission, peer).unwrap_err(), Refusal::Total { max: 1 }, "serving: not replaced");
        assert!(first.idle());
        let second = Slot::take(&admission, peer).expect("replaces the idle one");
        tokio::time::timeout(std::time::Duration::from_secs(1), first.replaced()).await.expect("woken");
        assert!(!first.busy(), "a replaced connection serves nothing more");
        drop(first);
        assert_eq!(admission.open_and_waiting(), (1, 1), "the replaced one's place is the newcomer's");
        drop(second);
        assert_eq!(admission.open_and_waiting(), (0, 0));
    }
}
