//! Performance sanity: a run-sized history (20,000 ops over 200 keys, ~3%
//! unknown) checks in well under a few seconds. No timing assertion; the
//! elapsed time is printed (`cargo test -- --nocapture`).

mod common;

use std::time::Instant;

use common::*;
use mooncake_jepsen::{LinearizabilityConfig, check_linearizable};

#[test]
fn twenty_thousand_ops_over_two_hundred_keys() {
    for seed in seeds(0..2) {
        let config = SimConfig {
            processes: 40,
            keys: 200,
            ops: 20_000,
            unknown_per_mille: 30,
            fail_per_mille: 20,
            max_op_ns: 100,
        };
        let history = simulate(seed, &config);
        let unknown = history.records().iter().filter(|r| r.is_unknown()).count();
        let started = Instant::now();
        let verdict = check_linearizable(&history, &LinearizabilityConfig::default());
        let elapsed = started.elapsed();
        eprintln!("seed {seed}: {} ops ({unknown} unknown) checked in {elapsed:?}: {verdict}", history.len());
        assert!(verdict.valid, "seed {seed}: {verdict}");
        assert_eq!(verdict.keys_checked, 200);
        assert_eq!(verdict.ops_checked + verdict.ops_ignored, 20_000);
    }
}

#[test]
fn a_corrupted_read_in_a_large_history_is_found() {
    let config = SimConfig { processes: 40, keys: 200, ops: 20_000, ..SimConfig::default() };
    for seed in seeds(0..2) {
        let history = simulate(seed, &config);
        let mut rng = Rng::new(seed);
        let (corrupted, index) = corrupt_read(&history, &mut rng, Corruption::NeverWritten).expect("history has gets");
        let started = Instant::now();
        let verdict = check_linearizable(&corrupted, &LinearizabilityConfig::default());
        eprintln!("seed {seed}: corrupted record {index} in {:?}: {verdict}", started.elapsed());
        assert_eq!(verdict.failures.len(), 1, "seed {seed}: {verdict}");
        assert_eq!(verdict.failures[0].key, corrupted.records()[index].key);
    }
}
