//! Tests of the log store: what survives a reopen, purges and truncation,
//! a log that went backwards, and which appends a leader syncs while they
//! replicate.

use std::path::Path;

use openraft::storage::RaftLogStorageExt;
use openraft::{CommittedLeaderId, EntryPayload};

use super::*;

/// Opens a log store on a fresh sled handle at `dir`.
fn open_at(dir: &Path) -> (sled::Db, LogStore) {
    // The previous handle's background threads (sled's, blocking sync
    // tasks) may still hold the directory's lock for a moment after the
    // test dropped it: wait for the lock, as a restarted process would
    // find it free.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let db = loop {
        match sled::Config::new().path(dir).open() {
            Ok(db) => break db,
            Err(e) if e.to_string().contains("lock") && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("open sled at {}: {e}", dir.display()),
        }
    };
    let sync = DataSync::open(db.clone(), dir, true, std::sync::Arc::new(crate::NoopObserver)).unwrap();
    let store = LogStore::open(&db, sync).unwrap();
    (db, store)
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry {
    Entry { log_id: log_id(term, index), payload: EntryPayload::Blank }
}

/// Appends blank entries `indexes` in `term`, waiting for the callback.
async fn append(store: &mut LogStore, term: u64, indexes: std::ops::RangeInclusive<u64>) {
    store.blocking_append(indexes.map(|i| blank(term, i))).await.unwrap();
}

async fn indexes(store: &mut LogStore) -> Vec<u64> {
    let entries = store.try_get_log_entries(..).await.unwrap();
    entries.iter().map(|e| e.log_id.index).collect()
}

#[tokio::test]
async fn empty_store_has_empty_state() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, mut store) = open_at(dir.path());
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, None);
    assert_eq!(state.last_log_id, None);
    assert_eq!(store.read_vote().await.unwrap(), None);
    assert_eq!(store.read_committed().await.unwrap(), None);
    assert!(store.try_get_log_entries(..).await.unwrap().is_empty());
}

#[tokio::test]
async fn appended_entries_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let written: Vec<Entry> = (1..=5).map(|i| blank(1 + i / 3, i)).collect();
    {
        let (_db, mut store) = open_at(dir.path());
        store.blocking_append(written.clone()).await.unwrap();
        store.save_committed(Some(log_id(2, 4))).await.unwrap();
    }
    let (_db, mut store) = open_at(dir.path());
    assert_eq!(store.try_get_log_entries(1..6).await.unwrap(), written);
    assert_eq!(store.try_get_log_entries(2..=3).await.unwrap(), written[1..3].to_vec());
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, None);
    assert_eq!(state.last_log_id, Some(log_id(2, 5)));
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(2, 4)));
}

/// Appends of one entry (a plain insert) and of several (a batch) mix in
/// index order, and both survive a reopen; an empty append changes nothing.
#[tokio::test]
async fn single_and_batched_appends_survive_reopen_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, mut store) = open_at(dir.path());
        append(&mut store, 1, 1..=1).await;
        append(&mut store, 1, 2..=4).await;
        append(&mut store, 2, 5..=5).await;
        store.blocking_append(Vec::new()).await.unwrap();
        append(&mut store, 2, 6..=6).await;
    }
    let (_db, mut store) = open_at(dir.path());
    assert_eq!(indexes(&mut store).await, (1..=6).collect::<Vec<_>>());
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 6)));
    assert_eq!(store.try_get_log_entries(5..=5).await.unwrap(), vec![blank(2, 5)]);
}

#[tokio::test]
async fn vote_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let vote = Vote::new_committed(7, 3);
    {
        let (_db, mut store) = open_at(dir.path());
        store.save_vote(&Vote::new(6, 2)).await.unwrap();
        store.save_vote(&vote).await.unwrap();
    }
    let (_db, mut store) = open_at(dir.path());
    assert_eq!(store.read_vote().await.unwrap(), Some(vote));
}

#[tokio::test]
async fn purge_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, mut store) = open_at(dir.path());
        append(&mut store, 1, 1..=10).await;
        store.purge(log_id(1, 4)).await.unwrap();
        assert_eq!(indexes(&mut store).await, (5..=10).collect::<Vec<_>>());
    }
    let (_db, mut store) = open_at(dir.path());
    assert_eq!(indexes(&mut store).await, (5..=10).collect::<Vec<_>>());
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(1, 10)));
}

/// Purged entries vanish for readers at once (their deletion runs in
/// the background); a restart finishes an interrupted deletion.
#[tokio::test]
async fn purged_entries_are_invisible_at_once_and_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, mut store) = open_at(dir.path());
        append(&mut store, 1, 1..=10).await;
        // As if the background deletion had not run yet: the marker only.
        store.write_meta(KEY_LAST_PURGED, &log_id(1, 6)).unwrap();
        store.first_live.store(7, Ordering::Release);
        assert_eq!(indexes(&mut store).await, (7..=10).collect::<Vec<_>>());
        assert_eq!(db.open_tree(LOG_TREE).unwrap().len(), 10, "entries still on disk");
        store.sync.sync().unwrap();
    }
    let (db, mut store) = open_at(dir.path());
    assert_eq!(db.open_tree(LOG_TREE).unwrap().len(), 4, "the restart deleted what the marker covers");
    assert_eq!(indexes(&mut store).await, (7..=10).collect::<Vec<_>>());
    // Purging everything: no leftover counts as the last entry.
    store.purge(log_id(1, 12)).await.unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 12)));
    assert!(indexes(&mut store).await.is_empty());
}

/// A data dir whose log lost committed entries it had synced (sled
/// recovering silently to an older state) is refused at open.
#[tokio::test]
async fn a_log_that_went_backwards_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, store) = open_at(dir.path());
        let mut store = store.with_watermark(dir.path()).unwrap();
        append(&mut store, 1, 1..=10).await;
        store.save_vote(&Vote::new(4, 1)).await.unwrap();
        store.save_committed(Some(log_id(1, 8))).await.unwrap();
        let w = store.watermark.clone().unwrap();
        // The record is written on a blocking thread: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while w.mark().committed_index != 8 {
            assert!(std::time::Instant::now() < deadline, "the watermark was never recorded");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    {
        // Still whole: accepted.
        let (db, store) = open_at(dir.path());
        store.with_watermark(dir.path()).unwrap();
        // The disk loses the tail: entries 6..=10.
        let log = db.open_tree(LOG_TREE).unwrap();
        for i in 6..=10u64 {
            log.remove(index_key(i)).unwrap();
        }
        db.flush().unwrap();
    }
    let (_db, store) = open_at(dir.path());
    let e = store.with_watermark(dir.path()).err().expect("refused").to_string();
    assert!(e.contains("went backwards") && e.contains("index 5") && e.contains("index 8"), "{e}");
}

#[tokio::test]
async fn purge_of_everything_keeps_last_log_id() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, mut store) = open_at(dir.path());
        append(&mut store, 1, 1..=3).await;
        // A snapshot install may purge beyond the end of the log.
        store.purge(log_id(2, 8)).await.unwrap();
    }
    let (_db, mut store) = open_at(dir.path());
    assert!(indexes(&mut store).await.is_empty());
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(2, 8)));
    assert_eq!(state.last_log_id, Some(log_id(2, 8)));
}

#[tokio::test]
async fn truncate_removes_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, mut store) = open_at(dir.path());
        append(&mut store, 1, 1..=6).await;
        store.truncate(log_id(1, 4)).await.unwrap();
        assert_eq!(indexes(&mut store).await, vec![1, 2, 3]);
        // The log continues from the truncation point in a new term.
        append(&mut store, 2, 4..=4).await;
    }
    let (_db, mut store) = open_at(dir.path());
    assert_eq!(indexes(&mut store).await, vec![1, 2, 3, 4]);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 4)));
}

#[tokio::test]
async fn reader_sees_appends_of_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, mut store) = open_at(dir.path());
    let mut reader = store.get_log_reader().await;
    append(&mut store, 1, 1..=3).await;
    let got = reader.try_get_log_entries(2..).await.unwrap();
    assert_eq!(got, vec![blank(1, 2), blank(1, 3)]);
}

#[tokio::test]
async fn committed_can_be_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, mut store) = open_at(dir.path());
    store.save_committed(Some(log_id(1, 2))).await.unwrap();
    store.save_committed(None).await.unwrap();
    assert_eq!(store.read_committed().await.unwrap(), None);
}

#[tokio::test]
async fn only_this_nodes_entries_as_leader_of_its_term_are_synced_while_they_replicate() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = open_at(dir.path());
    let mut store = store.with_own_id(1).unwrap();
    let me = |term| CommittedLeaderId::new(term, 1);
    assert!(!store.leads(&me(5)), "no vote yet");
    store.save_vote(&Vote::new(5, 1)).await.unwrap();
    assert!(!store.leads(&me(5)), "a candidate's vote is not leadership");
    store.save_vote(&Vote::new_committed(5, 1)).await.unwrap();
    assert!(store.leads(&me(5)));
    assert!(!store.leads(&me(4)), "its entries of an earlier term (replicated back to it) wait for their sync");
    assert!(!store.leads(&CommittedLeaderId::new(5, 2)), "another leader's entries");
    store.save_vote(&Vote::new_committed(6, 2)).await.unwrap();
    assert!(!store.leads(&me(6)), "a follower's acks stay true");
    // Whatever the path, appended entries end up synced and recorded.
    store.save_vote(&Vote::new_committed(7, 1)).await.unwrap();
    let flushed = store.flushed();
    store
        .blocking_append((1..=3).map(|i| Entry { log_id: LogId::new(me(7), i), payload: EntryPayload::Blank }))
        .await
        .unwrap();
    flushed.wait_for(3).await;
    assert_eq!(flushed.index(), 3);
    store.truncate(LogId::new(me(7), 2)).await.unwrap();
    assert_eq!(flushed.index(), 1, "a truncation cuts the synced prefix back");
}

/// Counts syncs.
#[derive(Default)]
struct CountingObserver(std::sync::atomic::AtomicU64);

impl crate::StoreObserver for CountingObserver {
    fn synced(&self, _took: std::time::Duration) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_followers_appends_are_synced_and_recorded_before_openraft_hears_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    let observer = std::sync::Arc::new(CountingObserver::default());
    let sync = DataSync::open(db.clone(), dir.path(), true, observer.clone()).unwrap();
    let mut store = LogStore::open(&db, sync).unwrap().with_own_id(1).unwrap();
    store.save_vote(&Vote::new_committed(3, 2)).await.unwrap();
    let flushed = store.flushed();
    for (n, last) in [(1u64, 2u64), (2, 5), (3, 6)] {
        let before = observer.0.load(std::sync::atomic::Ordering::SeqCst);
        let first = flushed.index() + 1;
        // Another leader's entries: completed only after a sync covers them.
        store
            .blocking_append((first..=last).map(|i| Entry { log_id: log_id(3, i), payload: EntryPayload::Blank }))
            .await
            .unwrap();
        assert!(observer.0.load(std::sync::atomic::Ordering::SeqCst) > before, "append {n}: completed unsynced");
        assert_eq!(flushed.index(), last, "append {n}: completed before the synced prefix covered it");
    }
}

/// A leader's unsynced entries may live on in followers only: it must
/// not resume its old term after a restart (see `with_own_id`).
#[tokio::test]
async fn a_leader_restarts_as_a_follower_of_its_term() {
    let dir = tempfile::tempdir().unwrap();
    let reopen = |own: Option<NodeId>| {
        let (db, store) = open_at(dir.path());
        let store = match own {
            Some(id) => store.with_own_id(id).unwrap(),
            None => store,
        };
        (db, store)
    };
    {
        let (_db, mut store) = reopen(Some(1));
        store.save_vote(&Vote::new_committed(5, 1)).await.unwrap();
    }
    {
        let (_db, mut store) = reopen(None);
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new_committed(5, 1)), "no id: left as saved");
    }
    {
        let (_db, mut store) = reopen(Some(2));
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new_committed(5, 1)), "another's leadership stays");
    }
    {
        let (_db, mut store) = reopen(Some(1));
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(5, 1)), "same term and vote, not leading");
        assert!(!store.leads(&CommittedLeaderId::new(5, 1)));
    }
    // Durable: the next open (by anyone) reads the resigned vote.
    let (_db, mut store) = reopen(None);
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(5, 1)));
}

#[tokio::test]
async fn a_store_reopened_counts_what_it_holds_as_synced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, mut store) = open_at(dir.path());
        append(&mut store, 1, 1..=4).await;
        store.purge(log_id(1, 2)).await.unwrap();
    }
    let (_db, store) = open_at(dir.path());
    assert_eq!(store.flushed().index(), 4);
}
