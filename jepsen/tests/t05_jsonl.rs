//! `history.jsonl` round trips: what the recorder writes, the checker reads.

mod common;

use common::*;
use mooncake_jepsen::{History, OpKind, OpRecord, Outcome, ProcessId, read_jsonl, write_jsonl, write_record};
use proptest::prelude::*;

#[test]
fn a_simulated_history_round_trips() {
    let history = simulate(7, &SimConfig::default());
    let mut bytes = Vec::new();
    write_jsonl(&mut bytes, history.records()).unwrap();
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), history.len());
    assert_eq!(read_jsonl(bytes.as_slice()).unwrap(), history);
}

#[test]
fn streamed_records_read_back() {
    let records = vec![put_ok(1, "k", 1, 0, 10), get(2, "k", Some(1), 20, 30)];
    let mut bytes = Vec::new();
    for record in &records {
        write_record(&mut bytes, record).unwrap();
    }
    assert_eq!(read_jsonl(bytes.as_slice()).unwrap().records(), records.as_slice());
}

#[test]
fn duplicate_put_values_are_refused_with_the_line() {
    let mut bytes = Vec::new();
    write_jsonl(&mut bytes, &[put_ok(1, "k", 1, 0, 10), put_fail(2, "k", 1, 20, 30)]).unwrap();
    let err = read_jsonl(bytes.as_slice()).unwrap_err().to_string();
    assert!(err.contains("record 1 (line 2)") && err.contains("repeats record 0"), "{err}");
}

fn arb_kind() -> impl Strategy<Value = OpKind> {
    prop_oneof![
        any::<u64>().prop_map(|value| OpKind::Put { value }),
        Just(OpKind::Get),
        Just(OpKind::Exists),
        Just(OpKind::Remove),
        Just(OpKind::RemoveAll),
    ]
}

fn arb_outcome(kind: OpKind) -> BoxedStrategy<Outcome> {
    let specific = match kind {
        OpKind::Put { .. } => Just(Outcome::Ok).boxed(),
        OpKind::Get => any::<Option<u64>>().prop_map(|value| Outcome::GetOk { value }).boxed(),
        OpKind::Exists => any::<bool>().prop_map(|exists| Outcome::ExistsOk { exists }).boxed(),
        OpKind::Remove => any::<bool>().prop_map(|existed| Outcome::RemoveOk { existed }).boxed(),
        OpKind::RemoveAll => Just(Outcome::Ok).boxed(),
    };
    prop_oneof![specific, Just(Outcome::Fail), Just(Outcome::Unknown)].boxed()
}

fn arb_record() -> impl Strategy<Value = OpRecord> {
    (arb_kind(), any::<u64>(), "[a-z\"\\\\é ]{0,8}", 0u64..1 << 60, 0u64..1 << 20).prop_flat_map(
        |(op, process, key, invoke_ns, duration_ns)| {
            (arb_outcome(op), any::<bool>()).prop_map(move |(outcome, open)| {
                let unknown_open = outcome == Outcome::Unknown && open;
                let complete_ns = (!unknown_open).then_some(invoke_ns + duration_ns);
                OpRecord { process: ProcessId(process), key: key.clone(), op, invoke_ns, complete_ns, outcome }
            })
        },
    )
}

proptest! {
    #[test]
    fn any_record_round_trips(record in arb_record()) {
        let history = History::new(vec![record]).unwrap();
        let mut bytes = Vec::new();
        write_jsonl(&mut bytes, history.records()).unwrap();
        prop_assert_eq!(read_jsonl(bytes.as_slice()).unwrap(), history);
    }
}
