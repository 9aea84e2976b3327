//! [`Table`]: the open connections of one server, in total and per
//! address, and which of them are waiting and so may be replaced.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// A server's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections at once, from every address together.
    pub total_max: usize,
    /// Most connections at once from one IP address.
    pub peer_max: usize,
}

/// One admitted connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// Which limit refused a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The server holds `total_max` connections, none of them waiting.
    Total { max: usize },
    /// The address holds `peer_max` connections, none of them waiting.
    Peer { max: usize },
}

/// What admitting a connection came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Admitted (as waiting for its first request).
    Admitted(ConnId),
    /// Admitted in the place of `evicted`, which the server must close.
    Replacing {
        admitted: ConnId,
        evicted: ConnId,
    },
    Refused(Refusal),
}

/// How a connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing received yet.
    Silent,
    /// Between requests.
    Idle,
    /// Serving a request (or handed to a server that does not say).
    Busy,
    /// Replaced by a newcomer; its place is given already.
    Evicted,
}

/// The open connections of one server. Victims for a newcomer are, in
/// order: the silent connections (oldest first), then the idle ones (the
/// longest idle first); a busy connection is never replaced.
#[derive(Debug)]
pub struct Table {
    limits: Limits,
    next: u64,
    open: usize,
    per_peer: HashMap<IpAddr, usize>,
    conns: HashMap<ConnId, (IpAddr, State)>,
    /// Waiting connections by when they began to wait: silent ones first.
    waiting: BTreeMap<(bool, u64), ConnId>,
    /// Where each waiting connection sits in `waiting`.
    waiting_key: HashMap<ConnId, (bool, u64)>,
}

impl Table {
    pub fn new(limits: Limits) -> Self {
        Table {
            limits,
            next: 0,
            open: 0,
            per_peer: HashMap::new(),
            conns: HashMap::new(),
            waiting: BTreeMap::new(),
            waiting_key: HashMap::new(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Changes the total limit (the server's descriptor budget moved).
    /// Connections already open stay; newcomers meet the new limit (and
    /// take the places of waiting connections while it is exceeded).
    pub fn set_total_max(&mut self, total_max: usize) {
        self.limits.total_max = total_max.max(1);
    }

    /// Connections holding a place (evicted ones no longer do).
    pub fn open(&self) -> usize {
        self.open
    }

    /// Connections that may be replaced now.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Admits a connection from `peer` (IPv4-mapped IPv6 addresses count
    /// as their IPv4 address). At a limit it takes the place of the first
    /// waiting connection (of `peer` itself when the per-address limit is
    /// the one reached), or is refused when none waits.
    pub fn admit(&mut self, peer: IpAddr) -> Admit {
        let peer = peer.to_canonical();
        let held = self.per_peer.get(&peer).copied().unwrap_or(0);
        let peer_full = held >= self.limits.peer_max;
        // The total is reported first: a full server refuses everyone alike.
        let hit = if self.open >= self.limits.total_max {
            Some(Refusal::Total { max: self.limits.total_max })
        } else if peer_full {
            Some(Refusal::Peer { max: self.limits.peer_max })
        } else {
            None
        };
        let evicted = match hit {
            None => None,
            Some(refusal) => {
                // With its own limit reached, only its own place will do.
                let same_peer = peer_full;
                let victim = self
                    .waiting
                    .values()
                    .copied()
                    .find(|id| !same_peer || self.conns.get(id).is_some_and(|(p, _)| *p == peer));
                let Some(victim) = victim else { return Admit::Refused(refusal) };
                self.evict(victim);
                Some(victim)
            }
        };
        let id = ConnId(self.next);
        self.next += 1;
        self.open += 1;
        *self.per_peer.entry(peer).or_insert(0) += 1;
        self.conns.insert(id, (peer, State::Silent));
        self.enqueue(id, true);
        match evicted {
            None => Admit::Admitted(id),
            Some(evicted) => Admit::Replacing { admitted: id, evicted },
        }
    }

    /// `id` received a request (or was handed to a server that serves it
    /// on its own): it is no longer replaceable. False when it was evicted
    /// meanwhile: the caller must close it.
    pub fn busy(&mut self, id: ConnId) -> bool {
        match self.conns.get_mut(&id) {
            Some((_, state)) if *state != State::Evicted => {
                *state = State::Busy;
                self.dequeue(id);
                true
            }
            _ => false,
        }
    }

    /// `id` waits for its next request: replaceable again, after every
    /// connection that began waiting before it. False when it was evicted.
    pub fn idle(&mut self, id: ConnId) -> bool {
        match self.conns.get_mut(&id) {
            Some((_, state)) if *state != State::Evicted => {
                *state = State::Idle;
                self.dequeue(id);
                self.enqueue(id, false);
                true
            }
            _ => false,
        }
    }

    /// Whether `id` was replaced by a newcomer (and must close).
    pub fn is_evicted(&self, id: ConnId) -> bool {
        self.conns.get(&id).is_some_and(|(_, s)| *s == State::Evicted)
    }

    /// `id` closed: gives its place back (an evicted connection's place
    /// went to its replacement already).
    pub fn close(&mut self, id: ConnId) {
        let Some((peer, state)) = self.conns.remove(&id) else { return };
        self.dequeue(id);
        if state != State::Evicted {
            self.release(peer);
        }
    }

    fn evict(&mut self, id: ConnId) {
        self.dequeue(id);
        if let Some((peer, state)) = self.conns.get_mut(&id) {
            *state = State::Evicted;
            let peer = *peer;
            self.release(peer);
        }
    }

    fn release(&mut self, peer: IpAddr) {
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

    fn enqueue(&mut self, id: ConnId, silent: bool) {
        // Silent connections sort before idle ones; each group by arrival.
        let key = (!silent, self.next);
        self.next += 1;
        self.waiting.insert(key, id);
        self.waiting_key.insert(id, key);
    }

    fn dequeue(&mut self, id: ConnId) {
        if let Some(key) = self.waiting_key.remove(&id) {
            self.waiting.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn table(total_max: usize, peer_max: usize) -> Table {
        Table::new(Limits { total_max, peer_max })
    }

    fn admitted(a: Admit) -> ConnId {
        match a {
            Admit::Admitted(id) => id,
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn busy_connections_keep_their_places_and_the_limits_hold() {
        let mut t = table(3, 2);
        let a = admitted(t.admit(ip(1)));
        let b = admitted(t.admit(ip(1)));
        assert!(t.busy(a) && t.busy(b));
        assert_eq!(t.admit(ip(1)), Admit::Refused(Refusal::Peer { max: 2 }));
        let c = admitted(t.admit(ip(2)));
        assert!(t.busy(c));
        assert_eq!(t.admit(ip(3)), Admit::Refused(Refusal::Total { max: 3 }));
        assert_eq!(t.open(), 3, "a refused connection is not counted");
        t.close(a);
        assert!(matches!(t.admit(ip(3)), Admit::Admitted(_)), "a closed place is free again");
    }

    #[test]
    fn a_newcomer_replaces_a_silent_connection_before_an_idle_one() {
        let mut t = table(3, 3);
        let idle = admitted(t.admit(ip(1)));
        assert!(t.busy(idle) && t.idle(idle));
        let silent = admitted(t.admit(ip(2)));
        let busy = admitted(t.admit(ip(3)));
        assert!(t.busy(busy));
        let Admit::Replacing { admitted: d, evicted } = t.admit(ip(4)) else { panic!() };
        assert_eq!(evicted, silent, "the silent one goes first, though the idle one waited longer");
        assert!(t.is_evicted(silent) && !t.busy(silent), "an evicted connection is closed, not served");
        t.close(silent);
        assert_eq!(t.open(), 3, "its place went to the newcomer");
        assert!(t.busy(d));
        let Admit::Replacing { admitted: e, evicted } = t.admit(ip(5)) else { panic!() };
        assert_eq!(evicted, idle, "then the idle one");
        assert!(t.busy(e));
        assert!(!t.idle(idle), "an evicted connection cannot wait again");
        assert_eq!(t.admit(ip(6)), Admit::Refused(Refusal::Total { max: 3 }), "busy ones are never replaced");
    }

    #[test]
    fn a_lowered_total_lets_newcomers_in_only_in_waiting_places() {
        let mut t = table(4, 4);
        let busy: Vec<ConnId> = (1..=3).map(|i| admitted(t.admit(ip(i)))).collect();
        for id in &busy {
            t.busy(*id);
        }
        t.set_total_max(2);
        assert_eq!(t.open(), 3, "open connections stay");
        assert_eq!(t.admit(ip(9)), Admit::Refused(Refusal::Total { max: 2 }), "no waiting place to take");
        t.close(busy[0]);
        t.close(busy[1]);
        assert!(matches!(t.admit(ip(9)), Admit::Admitted(_)), "back under the new total");
        t.set_total_max(0);
        assert_eq!(t.limits().total_max, 1, "never zero");
    }

    #[test]
    fn an_address_at_its_limit_replaces_only_its_own_connections() {
        let mut t = table(10, 1);
        let own = admitted(t.admit(ip(1)));
        assert!(t.busy(own));
        let _other = admitted(t.admit(ip(2)));
        assert_eq!(t.admit(ip(1)), Admit::Refused(Refusal::Peer { max: 1 }), "the other address's silent one stays");
        assert!(t.idle(own));
        assert!(matches!(t.admit(ip(1)), Admit::Replacing { evicted, .. } if evicted == own));
    }

    #[test]
    fn mapped_addresses_are_one_peer_and_closing_twice_changes_nothing() {
        let mut t = table(4, 1);
        let v4 = admitted(t.admit(IpAddr::from([127, 0, 0, 1])));
        assert!(t.busy(v4));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        assert_eq!(t.admit(mapped), Admit::Refused(Refusal::Peer { max: 1 }));
        t.close(v4);
        t.close(v4);
        assert_eq!((t.open(), t.waiting()), (0, 0));
    }
}
