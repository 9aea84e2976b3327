//! Criterion micro-benchmarks and the end-to-end benchmark with same-run
//! baselines. Not built yet: see issue "Benchmarks".
