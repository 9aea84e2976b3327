//! Seeded random histories from a simulated linearizable register. Replay one
//! seed with `JEPSEN_SEED=<n> cargo test -p mooncake-jepsen --test t30_generated`.

mod common;

use common::*;
use mooncake_jepsen::{History, LinearizabilityConfig, Verdict, check_linearizable};

fn lenient() -> LinearizabilityConfig {
    LinearizabilityConfig::default()
}

fn strict() -> LinearizabilityConfig {
    LinearizabilityConfig { remove_not_found_may_have_removed: false, ..Default::default() }
}

fn dump(history: &History) -> String {
    history.records().iter().enumerate().map(|(i, r)| format!("  {i}: {:?} {r}\n", r.key)).collect()
}

fn assert_valid(seed: u64, history: &History, verdict: &Verdict) {
    assert!(verdict.valid, "seed {seed}: a simulated linearizable history failed:\n{verdict}{}", dump(history));
}

#[test]
fn simulated_histories_are_valid() {
    // Why: no false alarms — whatever a correct store does must pass, with
    // races, failed ops, and unknown ops that did or did not take effect.
    for seed in seeds(0..300) {
        let config = SimConfig { unknown_per_mille: 30 + seed % 120, ..SimConfig::default() };
        let history = simulate(seed, &config);
        assert_valid(seed, &history, &check_linearizable(&history, &lenient()));
        assert_valid(seed, &history, &check_linearizable(&history, &strict()));
    }
}

#[test]
fn reads_of_values_never_written_are_always_caught() {
    // Why: an unambiguous corruption must never slip through.
    for seed in seeds(0..200) {
        let history = simulate(seed, &SimConfig::default());
        let mut rng = Rng::new(seed ^ 0xC0FFEE);
        let Some((corrupted, index)) = corrupt_read(&history, &mut rng, Corruption::NeverWritten) else { continue };
        let verdict = check_linearizable(&corrupted, &lenient());
        assert!(!verdict.valid, "seed {seed}: corrupted record {index} not caught:\n{}", dump(&corrupted));
        assert!(!verdict.failures.is_empty(), "seed {seed}: {verdict}");
    }
}

#[test]
fn plausible_corruptions_are_mostly_caught() {
    // Why: a read switched to another value of the key, or to not-found, is
    // usually impossible; count how often the checker sees it.
    let (mut caught, mut tried) = (0u32, 0u32);
    for seed in seeds(0..300) {
        let history = simulate(seed, &SimConfig::default());
        let mut rng = Rng::new(seed ^ 0xBAD);
        let Some((corrupted, _)) = corrupt_read(&history, &mut rng, Corruption::Plausible) else { continue };
        tried += 1;
        caught += u32::from(!check_linearizable(&corrupted, &lenient()).valid);
    }
    eprintln!("plausible corruptions caught: {caught} of {tried}");
    assert!(caught * 10 >= tried * 8, "only {caught} of {tried} plausible corruptions caught");
}

#[test]
fn agrees_with_a_brute_force_oracle_on_small_histories() {
    // Why: on histories small enough to try every order, the search must give
    // exactly the oracle's answer — so a corrupted read is caught whenever it
    // is unambiguously wrong, and never otherwise.
    let (mut invalid, mut total) = (0u32, 0u32);
    for seed in seeds(0..3000) {
        let config = SimConfig {
            processes: 2 + seed % 4,
            keys: 1,
            ops: 4 + (seed % 6) as usize,
            unknown_per_mille: 150,
            fail_per_mille: 50,
            max_op_ns: 40,
        };
        let mut history = simulate(seed, &config);
        let mut rng = Rng::new(seed ^ 0x5EED);
        if rng.chance_per_mille(600)
            && let Some((corrupted, _)) = corrupt_read(&history, &mut rng, Corruption::Plausible)
        {
            history = corrupted;
        }
        for (retried_remove, config) in [(true, lenient()), (false, strict())] {
            let expected = brute_force_linearizable(&history, retried_remove);
            let verdict = check_linearizable(&history, &config);
            assert_eq!(
                verdict.valid,
                expected,
                "seed {seed} retried_remove {retried_remove}:\n{verdict}{}",
                dump(&history)
            );
            total += 1;
            invalid += u32::from(!expected);
        }
    }
    eprintln!("oracle comparisons: {total}, of which invalid: {invalid}");
    assert!(invalid * 10 > total, "too few invalid cases to be a test: {invalid} of {total}");
}

#[test]
fn agrees_with_the_oracle_on_arbitrary_histories() {
    // Why: the simulator only makes near-valid histories; arbitrary answers
    // reach shapes it never does (double acked puts, removes of nothing, ...).
    let (mut valid, mut total) = (0u32, 0u32);
    for seed in seeds(0..3000) {
        let history = arbitrary_history(seed, 3 + (seed % 6) as usize);
        for (retried_remove, config) in [(true, lenient()), (false, strict())] {
            let expected = brute_force_linearizable(&history, retried_remove);
            let verdict = check_linearizable(&history, &config);
            assert_eq!(
                verdict.valid,
                expected,
                "seed {seed} retried_remove {retried_remove}:\n{verdict}{}",
                dump(&history)
            );
            total += 1;
            valid += u32::from(expected);
        }
    }
    eprintln!("arbitrary oracle comparisons: {total}, of which valid: {valid}");
    assert!(valid * 20 > total, "too few valid cases to be a test: {valid} of {total}");
}

#[test]
fn high_concurrency_on_one_key_still_finishes() {
    // Why: ten clients on one key is the most the notes recommend; it must
    // not run past the budget.
    for seed in seeds(0..5) {
        let config = SimConfig { processes: 10, keys: 1, ops: 200, ..SimConfig::default() };
        let history = simulate(seed, &config);
        let verdict = check_linearizable(&history, &lenient());
        assert_valid(seed, &history, &verdict);
        eprintln!("seed {seed}: 10 clients, 200 ops on one key: {} states", verdict.states_explored);
    }
}
