//! The Wing–Gong / Lowe search for a linearization of one key's operations.
//!
//! Calls and returns sit in one time-ordered, doubly linked event list. The
//! search walks it from the front: at a call it tries to take that op into the
//! linearization now (lifting its call and return out of the list); at a
//! return of an op not yet taken it has run out of time for that op and
//! backtracks. Each (set of linearized ops, register state) pair is explored
//! once (Lowe's memoization), so equal prefixes in different orders are not
//! searched twice.
//!
//! Ops with an unknown outcome have no return event: they may take effect any
//! time after invoke, or never. The search therefore succeeds as soon as every
//! op with a known completion is linearized; the unknown ops left over are the
//! ones that never took effect.
//!
//! An op with several possible successor states (an answered RemoveAll: it
//! removed the key or kept it) is tried each way in turn: on backtracking to
//! it, the search takes its next choice at the same place before moving on.

use std::time::Instant;

use crate::memo::{Memo, OpSet};
use crate::model::{CHOICES_MAX, ModelOp, State};

/// Marks the end of the event list.
const NIL: usize = usize::MAX;
/// The sentinel node in front of the first event.
const HEAD: usize = 0;
/// How many new states to explore between two looks at the clock.
const CLOCK_CHECK_STATES: usize = 1024;

/// One op prepared for the search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SearchOp {
    pub(crate) model: ModelOp,
    pub(crate) invoke_ns: u64,
    /// The op must have taken effect by then; `None` when it may take effect
    /// at any time after invoke, or never.
    pub(crate) deadline_ns: Option<u64>,
}

/// Limits on one key's search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) max_states: usize,
    pub(crate) deadline: Option<Instant>,
}

/// How a search ended.
#[derive(Debug)]
pub(crate) enum SearchResult {
    Linearizable { states: usize },
    NotLinearizable(Stuck),
    Exhausted { states: usize },
}

/// The furthest the search got: its longest linearized prefix and the op whose
/// return it then reached without being able to take that op in.
#[derive(Debug, Default)]
pub(crate) struct Stuck {
    /// Op indices, in linearization order.
    pub(crate) prefix: Vec<usize>,
    /// The register after `prefix`.
    pub(crate) state: State,
    /// The op that had to take effect next and could not.
    pub(crate) blocked: Option<usize>,
    pub(crate) states: usize,
}

/// Searches for a linearization of `ops` starting from an absent key.
pub(crate) fn search(ops: &[SearchOp], budget: &Budget) -> SearchResult {
    // The smallest fixed-size op set that fits keeps memo probes allocation-free.
    match ops.len().div_ceil(64) {
        0 | 1 => Search::<[u64; 1]>::new(ops).run(budget),
        2 => Search::<[u64; 2]>::new(ops).run(budget),
        3 | 4 => Search::<[u64; 4]>::new(ops).run(budget),
        5..=8 => Search::<[u64; 8]>::new(ops).run(budget),
        _ => Search::<Box<[u64]>>::new(ops).run(budget),
    }
}

/// A node of the event list.
#[derive(Clone, Copy, Debug)]
struct Event {
    op: usize,
    is_call: bool,
    /// For a call: its return node, or `NIL` when the op is open-ended.
    partner: usize,
    prev: usize,
    next: usize,
}

/// Calls and returns in time order; at equal times calls come first, so ops
/// that touch at one instant count as concurrent (never a false alarm).
struct EventList {
    nodes: Vec<Event>,
}

impl EventList {
    fn new(ops: &[SearchOp]) -> Self {
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (op, search_op) in ops.iter().enumerate() {
            order.push((search_op.invoke_ns, false, op));
            if let Some(deadline_ns) = search_op.deadline_ns {
                order.push((deadline_ns, true, op));
            }
        }
        order.sort_unstable();
        let head = Event { op: NIL, is_call: false, partner: NIL, prev: NIL, next: NIL };
        let mut nodes = vec![head; order.len() + 1];
        let mut call_node = vec![NIL; ops.len()];
        for (position, &(_, is_return, op)) in order.iter().enumerate() {
            let node = position + 1;
            let next = if node == order.len() { NIL } else { node + 1 };
            nodes[node] = Event { op, is_call: !is_return, partner: NIL, prev: node - 1, next };
            if is_return {
                nodes[call_node[op]].partner = node;
            } else {
                call_node[op] = node;
            }
        }
        nodes[HEAD].next = if order.is_empty() { NIL } else { 1 };
        Self { nodes }
    }

    fn first(&self) -> usize {
        self.nodes[HEAD].next
    }

    fn next(&self, node: usize) -> usize {
        self.nodes[node].next
    }

    /// Takes a call and its return out of the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        let partner = self.nodes[call].partner;
        if partner != NIL {
            self.unlink(partner);
        }
    }

    /// Puts back what `lift` took out; lifts are undone in reverse order.
    fn unlift(&mut self, call: usize) {
        let partner = self.nodes[call].partner;
        if partner != NIL {
            self.relink(partner);
        }
        self.relink(call);
    }

    fn unlink(&mut self, node: usize) {
        let Event { prev, next, .. } = self.nodes[node];
        self.nodes[prev].next = next;
        if next != NIL {
            self.nodes[next].prev = prev;
        }
    }

    fn relink(&mut self, node: usize) {
        let Event { prev, next, .. } = self.nodes[node];
        self.nodes[prev].next = node;
        if next != NIL {
            self.nodes[next].prev = node;
        }
    }
}

/// One op taken into the linearization, the state before it, and which of
/// its ways to take effect was taken.
#[derive(Clone, Copy, Debug)]
struct Frame {
    call: usize,
    prior: State,
    choice: u8,
}

struct Search<'a, S: OpSet> {
    ops: &'a [SearchOp],
    events: EventList,
    /// The linearized ops and every (linearized ops, state) pair explored.
    memo: Memo<S>,
    stack: Vec<Frame>,
    state: State,
    /// Ops with a known completion not yet linearized; zero means success.
    pending_definite: usize,
    deepest: Stuck,
}

impl<'a, S: OpSet> Search<'a, S> {
    fn new(ops: &'a [SearchOp]) -> Self {
        Self {
            ops,
            events: EventList::new(ops),
            memo: Memo::new(ops.len()),
            stack: Vec::new(),
            state: None,
            pending_definite: ops.iter().filter(|op| op.deadline_ns.is_some()).count(),
            deepest: Stuck::default(),
        }
    }

    fn run(mut self, budget: &Budget) -> SearchResult {
        let mut entry = self.events.first();
        while self.pending_definite > 0 {
            if entry != NIL && self.events.nodes[entry].is_call {
                if !self.try_linearize(entry, 0) {
                    entry = self.events.next(entry);
                    continue;
                }
            } else {
                self.note_stuck(entry);
                match self.backtrack() {
                    // The same op, taken the next way it may take effect.
                    Some(frame) if self.try_linearize(frame.call, frame.choice + 1) => {}
                    Some(frame) => {
                        entry = self.events.next(frame.call);
                        continue;
                    }
                    None => {
                        self.deepest.states = self.memo.len();
                        return SearchResult::NotLinearizable(self.deepest);
                    }
                }
            }
            if self.over_budget(budget) {
                return SearchResult::Exhausted { states: self.memo.len() };
            }
            entry = self.events.first();
        }
        SearchResult::Linearizable { states: self.memo.len() }
    }

    /// Takes the op of `call` into the linearization the first way, from
    /// `first_choice` on, whose answer fits the current state and whose
    /// resulting (set, state) pair is new.
    fn try_linearize(&mut self, call: usize, first_choice: u8) -> bool {
        let op = self.events.nodes[call].op;
        self.memo.flip(op);
        for choice in first_choice..CHOICES_MAX {
            let Some(next_state) = self.ops[op].model.step_choice(self.state, choice) else { continue };
            if !self.memo.insert(next_state) {
                continue;
            }
            self.stack.push(Frame { call, prior: self.state, choice });
            self.state = next_state;
            self.events.lift(call);
            if self.ops[op].deadline_ns.is_some() {
                self.pending_definite -= 1;
            }
            return true;
        }
        self.memo.flip(op);
        false
    }

    /// Undoes the last linearized op; returns its frame.
    fn backtrack(&mut self) -> Option<Frame> {
        let frame = self.stack.pop()?;
        let op = self.events.nodes[frame.call].op;
        self.state = frame.prior;
        self.memo.flip(op);
        self.events.unlift(frame.call);
        if self.ops[op].deadline_ns.is_some() {
            self.pending_definite += 1;
        }
        Some(frame)
    }

    /// Remembers the longest prefix seen and the op that stopped it.
    fn note_stuck(&mut self, entry: usize) {
        let blocked = (entry != NIL).then(|| self.events.nodes[entry].op);
        if self.deepest.blocked.is_some() && self.stack.len() <= self.deepest.prefix.len() {
            return;
        }
        self.deepest.prefix = self.stack.iter().map(|frame| self.events.nodes[frame.call].op).collect();
        self.deepest.state = self.state;
        self.deepest.blocked = blocked;
    }

    fn over_budget(&self, budget: &Budget) -> bool {
        let states = self.memo.len();
        if states > budget.max_states {
            return true;
        }
        let look_at_clock = states.is_multiple_of(CLOCK_CHECK_STATES);
        look_at_clock && budget.deadline.is_some_and(|deadline| Instant::now() >= deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(model: ModelOp, invoke_ns: u64, deadline_ns: Option<u64>) -> SearchOp {
        SearchOp { model, invoke_ns, deadline_ns }
    }

    fn run(ops: &[SearchOp]) -> SearchResult {
        search(ops, &Budget { max_states: 10_000, deadline: None })
    }

    #[test]
    fn empty_and_unknown_only_histories_are_linearizable() {
        assert!(matches!(run(&[]), SearchResult::Linearizable { .. }));
        let unknown = [op(ModelOp::PutMaybe(1), 0, None)];
        assert!(matches!(run(&unknown), SearchResult::Linearizable { .. }));
    }

    #[test]
    fn concurrent_ops_may_reorder() {
        // The get starts before the put returns, so it may see the new value.
        let ops = [op(ModelOp::PutAcked(1), 0, Some(10)), op(ModelOp::Get(Some(1)), 5, Some(6))];
        assert!(matches!(run(&ops), SearchResult::Linearizable { .. }));
    }

    #[test]
    fn touching_intervals_count_as_concurrent() {
        let ops = [op(ModelOp::Get(Some(1)), 0, Some(10)), op(ModelOp::PutAcked(1), 10, Some(20))];
        assert!(matches!(run(&ops), SearchResult::Linearizable { .. }));
    }

    #[test]
    fn stuck_reports_the_blocked_op_after_the_longest_prefix() {
        let ops = [op(ModelOp::PutAcked(1), 0, Some(10)), op(ModelOp::Get(None), 20, Some(30))];
        let SearchResult::NotLinearizable(stuck) = run(&ops) else { panic!("expected a violation") };
        assert_eq!(stuck.prefix, vec![0]);
        assert_eq!(stuck.blocked, Some(1));
        assert_eq!(stuck.state, Some(1));
    }

    #[test]
    fn an_answered_remove_all_is_tried_both_ways_inside_its_interval() {
        let put = op(ModelOp::PutAcked(1), 0, Some(10));
        let remove_all = op(ModelOp::RemovedOrKept, 20, Some(30));
        let read = |value, at| op(ModelOp::Get(value), at, Some(at + 10));
        // Kept (its second choice, found by backtracking into it), or removed.
        assert!(matches!(run(&[put, remove_all, read(Some(1), 40)]), SearchResult::Linearizable { .. }));
        assert!(matches!(run(&[put, remove_all, read(None, 40)]), SearchResult::Linearizable { .. }));
        // Concurrent with it, a read may see either side of it.
        let both = [put, remove_all, read(Some(1), 22), read(None, 25)];
        assert!(matches!(run(&both), SearchResult::Linearizable { .. }));
        // But it takes effect once, before it completes: the key cannot be
        // seen present after it and then vanish with nothing to remove it.
        let late = [put, remove_all, read(Some(1), 40), read(None, 60)];
        let SearchResult::NotLinearizable(stuck) = run(&late) else { panic!("expected a violation") };
        assert_eq!(stuck.blocked, Some(3));
    }

    #[test]
    fn budget_stops_the_search() {
        let ops: Vec<SearchOp> = (0..20).map(|value| op(ModelOp::PutMaybe(value), 0, None)).collect();
        let mut all = ops;
        all.push(op(ModelOp::Get(Some(999)), 0, Some(1)));
        let result = search(&all, &Budget { max_states: 5, deadline: None });
        assert!(matches!(result, SearchResult::Exhausted { .. }), "{result:?}");
    }
}
