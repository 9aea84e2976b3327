//! Three real `mooncake-master` processes on loopback: a concurrent
//! control-plane workload, SIGKILL of the leader mid-run, and then the
//! promises users rely on: a new leader serves within about a second, every
//! acknowledged operation is on the new leader, the killed master restarts
//! from its data dir and catches up, and membership can grow and shrink.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mooncake_client::MasterClient;
use mooncake_proto::master::{PutStartRequest, Segment};
use mooncake_testkit::{Cluster, wait_until};
use tokio::sync::Mutex;

const SEGMENT_BYTES: u64 = 1 << 30;
const WRITERS: u64 = 6;

#[derive(Default)]
struct Acked {
    puts: BTreeSet<String>,
    removes: BTreeSet<String>,
    /// Removes sent, acknowledged or not: a remove whose answer was lost in
    /// the failover may or may not have taken effect.
    remove_attempts: BTreeSet<String>,
    ops: u64,
}

/// One writer: put keys (PutStart + PutEnd), remove every third one; record
/// only what was acknowledged.
async fn writer(client: Arc<MasterClient>, w: u64, stop: Arc<AtomicBool>, acked: Arc<Mutex<Acked>>) {
    let client_id = 1000 + w;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("w{w}-k{i}");
        let req = PutStartRequest { client_id, key: key.clone(), size: 4096, replica_num: 1, ..Default::default() };
        if client.put_start(req).await.is_ok() && client.put_end(client_id, &key, i as u32).await.is_ok() {
            let mut a = acked.lock().await;
            a.puts.insert(key.clone());
            a.ops += 2;
        }
        if i % 3 == 2 {
            let victim = format!("w{w}-k{}", i - 1);
            acked.lock().await.remove_attempts.insert(victim.clone());
            if client.remove(&victim, true).await.is_ok() {
                let mut a = acked.lock().await;
                a.removes.insert(victim);
                a.ops += 1;
            }
        }
        i += 1;
    }
}

async fn mount_segments(client: &MasterClient) {
    for s in 0..2u64 {
        let seg = Segment {
            id: 77 + s,
            size: SEGMENT_BYTES,
            endpoint: format!("127.0.0.1:{}", 9000 + s),
            host_id: format!("host-{s}"),
            ..Default::default()
        };
        client.mount_segment(500 + s, seg).await.expect("mount segment");
    }
}

/// Waits until master `id` has applied at least `index` and reports `hash`.
async fn wait_converged(cluster: &Cluster, id: u64, hash: u64, index: u64) {
    wait_until(
        &format!("master {id} to reach applied index {index} with hash {hash:x}"),
        Duration::from_secs(20),
        || async {
            let info = cluster.info(id).await?;
            (info.applied_index >= index && info.state_hash == hash).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kill_loses_nothing_and_membership_changes() {
    let mut cluster = Cluster::builder().masters(3).master_bin(env!("CARGO_BIN_EXE_mooncake-master")).start();
    let result = tokio::time::timeout(Duration::from_secs(120), scenario(&mut cluster)).await;
    if !matches!(result, Ok(true)) {
        cluster.dump_logs();
        panic!("scenario failed or timed out");
    }
}

async fn scenario(cluster: &mut Cluster) -> bool {
    // Phase 1: a leader is elected and serves.
    let (old_leader, old_term) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = Arc::new(cluster.client());
    mount_segments(&client).await;

    // Phase 2: a concurrent workload runs while the leader is SIGKILLed.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let tasks: Vec<_> =
        (0..WRITERS).map(|w| tokio::spawn(writer(client.clone(), w, stop.clone(), acked.clone()))).collect();
    wait_until("the workload to make progress", Duration::from_secs(10), || async {
        (acked.lock().await.ops > 200).then_some(())
    })
    .await;
    let before_kill = acked.lock().await.ops;
    let killed_at = Instant::now();
    cluster.kill(old_leader);

    // A new leader serves within about a second: measure the first write
    // acknowledged after the kill.
    let probe = cluster.client();
    wait_until("a write to succeed after the leader was killed", Duration::from_secs(10), || async {
        let req = PutStartRequest { client_id: 1, key: "probe".into(), size: 64, replica_num: 1, ..Default::default() };
        probe.put_start(req).await.ok()?;
        probe.put_end(1, "probe", 1).await.ok()
    })
    .await;
    let gap = killed_at.elapsed();
    let (new_leader, new_term) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    eprintln!(
        "failover: master {old_leader} (term {old_term}) killed; master {new_leader} (term {new_term}) served a write after {gap:?}"
    );
    assert_ne!(new_leader, old_leader);
    assert!(new_term > old_term);
    assert!(gap < Duration::from_millis(2500), "failover gap {gap:?} is not about a second");

    // Let the workload run on the new leader, then stop it.
    wait_until("the workload to continue on the new leader", Duration::from_secs(10), || async {
        (acked.lock().await.ops > before_kill + 200).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer task");
    }
    let acked = acked.lock().await;
    let run = killed_at.elapsed().as_secs_f64();
    eprintln!("workload: {} acknowledged ops ({} puts, {} removes)", acked.ops, acked.puts.len(), acked.removes.len());

    // Phase 3: every acknowledged op is on the new leader.
    let listed = client.list_objects("w", 100_000).await.expect("list objects");
    let present: BTreeSet<String> = listed.iter().map(|o| o.key.clone()).collect();
    for key in &acked.puts {
        if acked.removes.contains(key) {
            assert!(!present.contains(key), "acknowledged remove of {key} was lost");
        } else if !acked.remove_attempts.contains(key) {
            assert!(present.contains(key), "acknowledged put of {key} was lost");
        }
    }
    eprintln!(
        "verified {} acknowledged puts and {} removes on master {new_leader} ({run:.1}s after the kill)",
        acked.puts.len(),
        acked.removes.len()
    );

    // Phase 4: the killed master restarts from its data dir and catches up.
    cluster.restart(old_leader);
    let leader_info = cluster.info(new_leader).await.expect("leader info");
    wait_converged(cluster, old_leader, leader_info.state_hash, leader_info.applied_index).await;

    // Phase 5: a fourth master joins by membership change, then one is removed.
    let addr4 = cluster.start_joiner(4);
    client.add_learner(4, &addr4).await.expect("add learner 4");
    client.change_membership(vec![1, 2, 3, 4], false).await.expect("promote 4");
    let leader_info = cluster.info(new_leader).await.expect("leader info");
    wait_converged(cluster, 4, leader_info.state_hash, leader_info.applied_index).await;
    // The leader itself is removed: the hardest case (it steps down once the
    // new configuration commits, and the rest elect a leader among them).
    let remove = new_leader;
    let remaining: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|i| *i != remove).collect();
    client.change_membership(remaining.clone(), false).await.expect("remove a master");
    // Every remaining member learns the new configuration.
    for id in &remaining {
        wait_until(&format!("master {id} to see voters {remaining:?}"), Duration::from_secs(10), || async {
            let info = cluster.info(*id).await?;
            let voters: Vec<u64> = info.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
            (voters == remaining).then_some(())
        })
        .await;
    }

    // The cluster still takes writes. The removed master may have been the
    // leader: it steps down once the new configuration commits, and a
    // reservation made on it dies with its term ("put expired"), so a caller
    // puts again, as any client does after a leader change.
    wait_until("a write after the membership changes", Duration::from_secs(10), || async {
        let req = PutStartRequest {
            client_id: 1,
            key: "after-membership".into(),
            size: 64,
            replica_num: 1,
            ..Default::default()
        };
        client.put_start(req).await.ok()?;
        client.put_end(1, "after-membership", 1).await.ok()
    })
    .await;
    let leader = cluster.info(remaining[0]).await.expect("voter info").leader_id;
    assert!(remaining.contains(&leader), "leader {leader} is not among the voters {remaining:?}");
    // The removed leader stepped down by ending its process, cleanly.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = cluster.master_exit_status(remove) {
            break status;
        }
        assert!(Instant::now() < deadline, "removed master {remove} still runs 10 s after its removal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "removed master {remove} exited with {status}");
    true
}

/// A leader's own entries replicate while they sync, so a crashed leader may
/// restart without entries its followers hold. It must never lead its old
/// term again (it would write different entries under the same log ids):
/// it restarts as a follower, and the cluster's next leader has a new term.
/// The other masters are paused across the restart, so without that rule the
/// restarted master would be the leader of its old term before anyone else
/// could run an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_leader_never_resumes_its_old_term() {
    let mut cluster = Cluster::builder().masters(3).master_bin(env!("CARGO_BIN_EXE_mooncake-master")).start();
    let (old_leader, old_term) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old_leader).collect();
    for id in &others {
        cluster.pause(*id);
    }
    cluster.kill(old_leader);
    cluster.restart(old_leader);
    let info = wait_until("the restarted master answers", Duration::from_secs(10), || async {
        cluster.info(old_leader).await
    })
    .await;
    assert!(
        !(info.leader_id == old_leader && info.term == old_term),
        "master {old_leader} restarted as the leader of its old term {old_term}"
    );
    for id in &others {
        cluster.resume(*id);
    }
    let (leader, term) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert!(term > old_term, "master {leader} leads term {term}, not newer than the crashed leader's {old_term}");
}

/// A founding master whose data dir was wiped must not come back blank under
/// its old id (it lost the votes and log it promised): its peers heard from
/// it, so it refuses to start and says how to replace it. The cluster keeps
/// serving without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_with_a_wiped_data_dir_refuses_to_rejoin_under_its_old_id() {
    let mut cluster = Cluster::builder().masters(3).master_bin(env!("CARGO_BIN_EXE_mooncake-master")).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    let req = PutStartRequest { client_id: 7, key: "before".into(), size: 4096, replica_num: 1, ..Default::default() };
    mount_segments(&client).await;
    client.put_start(req).await.expect("put start");
    client.put_end(7, "before", 0).await.expect("put end");
    let victim = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    cluster.kill(victim);
    let dir = cluster.inner.node(mooncake_testkit::Role::Master, victim).expect("node").data_dir.clone();
    std::fs::remove_dir_all(&dir).expect("wipe the data dir");
    cluster.restart(victim);
    let status = wait_until("the blank master to exit", Duration::from_secs(20), || {
        let status = cluster.master_exit_status(victim);
        async move { status }
    })
    .await;
    assert!(!status.success(), "a blank master under an old id must not run: {status:?}");
    let log = std::fs::read_to_string(&cluster.inner.node(mooncake_testkit::Role::Master, victim).unwrap().log)
        .unwrap_or_default();
    assert!(log.contains(&format!("must not rejoin under id {victim}")), "the refusal says why: {log}");
    assert!(log.contains("--join"), "and how to replace it: {log}");
    // The others keep serving.
    let req = PutStartRequest { client_id: 7, key: "after".into(), size: 4096, replica_num: 1, ..Default::default() };
    client.put_start(req).await.expect("put start without the refused master");
}
