//! openraft's storage conformance suite against the sled store: every test
//! gets a fresh data directory, removed when the test's guard drops.

use mooncake_raft_store::{LogStore, StateMachineStore, StoreOptions, TypeConfig, open_store};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

/// Opens a store in a fresh temporary directory.
struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| openraft::StorageIOError::write(&e))?;
        let (log, sm) = open_store(&StoreOptions::new(dir.path())).map_err(|e| openraft::StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("openraft storage suite failed: {e}");
    }
}
