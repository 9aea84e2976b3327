//! Which connections a [`super::TransferServer`] admits: at most
//! `connections_max` at once in total and `peer_connections_max` from one IP
//! address. A pure count, tested without sockets; a [`Slot`] is one admitted
//! connection and gives its place back when dropped (however its task ends:
//! finished, failed, panicked or aborted at shutdown).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server serves `max` connections already.
    Total { max: usize },
    /// The peer's address holds `max` connections already.
    Peer { max: usize },
}

/// Open connections, in total and per peer address. The per-peer map holds
/// only addresses with an open connection, so it never has more than
/// `total_max` entries.
#[derive(Debug)]
pub(crate) struct Admission {
    total_max: usize,
    peer_max: usize,
    open: usize,
    per_peer: HashMap<IpAddr, usize>,
}

impl Admission {
    pub(crate) fn new(total_max: usize, peer_max: usize) -> Self {
        Self { total_max, peer_max, open: 0, per_peer: HashMap::new() }
    }

    /// Counts a new connection from `peer` in, or says which limit it hits.
    /// The total is checked first: a full server refuses everyone alike.
    pub(crate) fn admit(&mut self, peer: IpAddr) -> Result<(), Refusal> {
        if self.open >= self.total_max {
            return Err(Refusal::Total { max: self.total_max });
        }
        let held = self.per_peer.entry(peer).or_insert(0);
        if *held >= self.peer_max {
            return Err(Refusal::Peer { max: self.peer_max });
        }
        *held += 1;
        self.open += 1;
        Ok(())
    }

    /// Gives back the place of a connection from `peer` admitted earlier.
    pub(crate) fn release(&mut self, peer: IpAddr) {
        let held = self.per_peer.get_mut(&peer);
        assert!(held.as_deref().is_some_and(|n| *n > 0) && self.open > 0, "released a connection never admitted");
        if let Some(held) = held {
            *held -= 1;
            if *held == 0 {
                self.per_peer.remove(&peer);
            }
        }
        self.open -= 1;
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open
    }
}

/// The admission count shared by the accept loop and the connection tasks.
pub(crate) type SharedAdmission = Arc<Mutex<Admission>>;

/// One admitted connection's place; released on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    admission: SharedAdmission,
    peer: IpAddr,
}

impl Slot {
    /// Admits a connection from `peer` (IPv4-mapped IPv6 addresses count as
    /// their IPv4 address, so a dual-stack listener sees one peer once).
    pub(crate) fn take(admission: &SharedAdmission, peer: IpAddr) -> Result<Slot, Refusal> {
        let peer = peer.to_canonical();
        admission.lock().unwrap_or_else(PoisonError::into_inner).admit(peer)?;
        Ok(Slot { admission: admission.clone(), peer })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.lock().unwrap_or_else(PoisonError::into_inner).release(self.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_peer_takes_at_most_its_share_and_others_still_get_in() {
        let mut a = Admission::new(5, 2);
        assert_eq!(a.admit(ip(1)), Ok(()));
        assert_eq!(a.admit(ip(1)), Ok(()));
        assert_eq!(a.admit(ip(1)), Err(Refusal::Peer { max: 2 }));
        assert_eq!(a.admit(ip(2)), Ok(()));
        assert_eq!(a.open(), 3, "a refused connection is not counted");
        a.release(ip(1));
        assert_eq!(a.admit(ip(1)), Ok(()), "a released place is free again");
    }

    #[test]
    fn the_total_cap_refuses_every_peer() {
        let mut a = Admission::new(3, 2);
        for peer in [1, 2, 3] {
            assert_eq!(a.admit(ip(peer)), Ok(()));
        }
        assert_eq!(a.admit(ip(4)), Err(Refusal::Total { max: 3 }));
        assert_eq!(a.admit(ip(1)), Err(Refusal::Total { max: 3 }), "the total is checked first");
        for peer in [1, 2, 3] {
            a.release(ip(peer));
        }
        assert_eq!((a.open(), a.per_peer.len()), (0, 0), "no entry is left for closed peers");
    }

    #[test]
    fn slots_give_their_place_back_on_drop_and_mapped_addresses_are_one_peer() {
        let shared: SharedAdmission = Arc::new(Mutex::new(Admission::new(4, 1)));
        let v4 = IpAddr::from([127, 0, 0, 1]);
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let slot = Slot::take(&shared, v4).unwrap();
        assert_eq!(Slot::take(&shared, mapped).unwrap_err(), Refusal::Peer { max: 1 });
        drop(slot);
        let again = Slot::take(&shared, mapped).unwrap();
        assert_eq!(shared.lock().unwrap().open(), 1);
        drop(again);
        assert_eq!(shared.lock().unwrap().open(), 0);
    }

    #[test]
    #[should_panic(expected = "never admitted")]
    fn releasing_an_unknown_peer_is_a_bug() {
        Admission::new(1, 1).release(ip(9));
    }
}
