//! `mooncake status`: the cluster as each master sees it, gathered from every
//! given master, as a readable table or JSON.

use std::fmt::Write;

use serde::Serialize;

use mooncake_client::MasterClient;

/// One master's answer (or why it did not answer).
#[derive(Debug, Clone, Serialize)]
pub struct MasterView {
    pub addr: String,
    pub reachable: bool,
    pub error: Option<String>,
    pub node_id: u64,
    pub role: String,
    pub leader_id: u64,
    pub leader_addr: String,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub last_log_index: u64,
    pub segments: u64,
    pub objects: u64,
    pub clients: u64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub state_hash: String,
    /// Why this master cannot serve (its `/ready` reason); `None` when ready.
    pub not_ready: Option<String>,
    /// Built with the planted-bugs feature (development only; docs/JEPSEN.md).
    pub planted_bugs: bool,
    /// The planted bugs it runs with (flag names without `--dev-unsafe-`).
    pub planted_bugs_on: Vec<String>,
}

/// A member as the leader reports it, with its replication lag.
#[derive(Debug, Clone, Serialize)]
pub struct MemberView {
    pub id: u64,
    pub addr: String,
    pub role: String,
    pub voter: bool,
    pub matched_index: Option<u64>,
    pub lag: Option<u64>,
}

/// One background duty as the leader reports it: its tick, rounds, errors,
/// and how long ago it last succeeded and last failed.
#[derive(Debug, Clone, Serialize)]
pub struct DutyView {
    pub name: String,
    pub tick_ms: u64,
    pub runs: u64,
    pub errors: u64,
    pub last_success_ms_ago: Option<u64>,
    pub last_error_ms_ago: Option<u64>,
    pub last_error: String,
}

/// One storage tier as the leader reports it (docs/TIERS.md).
#[derive(Debug, Clone, Serialize)]
pub struct TierView {
    /// "memory" or "disk".
    pub tier: String,
    pub segments: u64,
    /// Disk segments of expired store nodes kept for their grace.
    pub detached: u64,
    pub used_bytes: u64,
    /// Capacity of the attached segments.
    pub capacity_bytes: u64,
}

/// The whole picture.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    pub leader_id: Option<u64>,
    pub leader_addr: Option<String>,
    pub term: Option<u64>,
    pub members: Vec<MemberView>,
    pub masters: Vec<MasterView>,
    /// Per tier, from the leader's view (empty when no leader answered).
    pub tiers: Vec<TierView>,
    /// The leader's background duties (empty when no leader answered).
    pub duties: Vec<DutyView>,
    /// Tenants with objects or a quota (docs/TENANTS.md; empty when none
    /// has, or the leader did not answer).
    pub tenants: Vec<TenantView>,
    /// Objects waiting for a lost replica to be made again (the leader's
    /// repair backlog; docs/OPERATIONS.md, "Lost replicas").
    pub repairs_pending: u64,
    /// Keys holding memory replicas the leader added because they were hot
    /// (docs/OPERATIONS.md, "Hot keys").
    pub hot_keys_fanned: u64,
}

/// One tenant's usage and quota.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TenantView {
    pub name: String,
    pub objects: u64,
    pub used_bytes: u64,
    /// None: no quota.
    pub quota_bytes: Option<u64>,
}

/// The tiers of a leader's segment listing.
fn tiers_of(segments: &[mooncake_proto::master::SegmentUsage]) -> Vec<TierView> {
    use mooncake_proto::master::Tier;
    [(Tier::Dram, "memory"), (Tier::Ssd, "disk")]
        .into_iter()
        .map(|(tier, name)| {
            let of_tier: Vec<_> =
                segments.iter().filter(|u| u.segment.as_ref().is_some_and(|s| s.tier == tier as i32)).collect();
            let attached = of_tier.iter().filter(|u| !u.detached);
            TierView {
                tier: name.into(),
                segments: of_tier.len() as u64,
                detached: of_tier.iter().filter(|u| u.detached).count() as u64,
                used_bytes: of_tier.iter().map(|u| u.used_bytes).sum(),
                capacity_bytes: attached.map(|u| u.segment.as_ref().map_or(0, |s| s.size)).sum(),
            }
        })
        .collect()
}

/// Asks every address in `addrs` for its view.
pub async fn gather(client: &MasterClient, addrs: &[String]) -> ClusterStatus {
    let mut masters = Vec::new();
    let mut members = Vec::new();
    let mut tiers = Vec::new();
    let mut duties = Vec::new();
    let mut repairs_pending = 0;
    let mut hot_keys_fanned = 0;
    for addr in addrs {
        match client.cluster_info_with_hash_of(addr).await {
            Ok(info) => {
                let me = info.members.iter().find(|m| m.id == info.node_id);
                if info.leader_id == info.node_id {
                    tiers = tiers_of(&info.segments);
                    repairs_pending = info.repairs_pending;
                    hot_keys_fanned = info.hot_keys_fanned;
                    duties = info
                        .duties
                        .iter()
                        .map(|d| DutyView {
                            name: d.name.clone(),
                            tick_ms: d.tick_ms,
                            runs: d.runs,
                            errors: d.errors,
                            last_success_ms_ago: d.last_success_ms_ago,
                            last_error_ms_ago: d.last_error_ms_ago,
                            last_error: d.last_error.clone(),
                        })
                        .collect();
                    let last = info.last_log_index;
                    members = info
                        .members
                        .iter()
                        .map(|m| {
                            let matched = m.has_matched_index.then_some(m.matched_index);
                            let matched = if m.id == info.node_id { Some(last) } else { matched };
                            MemberView {
                                id: m.id,
                                addr: m.addr.clone(),
                                role: m.role.clone(),
                                voter: m.voter,
                                matched_index: matched,
                                lag: matched.map(|x| last.saturating_sub(x)),
                            }
                        })
                        .collect();
                }
                masters.push(MasterView {
                    addr: addr.clone(),
                    reachable: true,
                    error: None,
                    node_id: info.node_id,
                    role: me.map(|m| m.role.clone()).unwrap_or_else(|| "not a member".into()),
                    leader_id: info.leader_id,
                    leader_addr: info.leader_addr.clone(),
                    term: info.term,
                    commit_index: info.commit_index,
                    applied_index: info.applied_index,
                    last_log_index: info.last_log_index,
                    segments: info.segment_count,
                    objects: info.object_count,
                    clients: info.client_count,
                    capacity_bytes: info.capacity_bytes,
                    used_bytes: info.used_bytes,
                    state_hash: format!("{:016x}", info.state_hash),
                    not_ready: (!info.not_ready.is_empty()).then(|| info.not_ready.clone()),
                    planted_bugs: info.planted_bugs,
                    planted_bugs_on: info.planted_bugs_on.clone(),
                });
            }
            Err(e) => masters.push(MasterView {
                addr: addr.clone(),
                reachable: false,
                error: Some(e.to_string()),
                node_id: 0,
                role: "unreachable".into(),
                leader_id: 0,
                leader_addr: String::new(),
                term: 0,
                commit_index: 0,
                applied_index: 0,
                last_log_index: 0,
                segments: 0,
                objects: 0,
                clients: 0,
                capacity_bytes: 0,
                used_bytes: 0,
                state_hash: String::new(),
                not_ready: Some("unreachable".into()),
                planted_bugs: false,
                planted_bugs_on: Vec::new(),
            }),
        }
    }
    let leader = masters.iter().filter(|m| m.reachable && m.leader_id != 0).max_by_key(|m| m.term);
    let tenants = match leader {
        Some(_) => client.list_tenants().await.unwrap_or_default(),
        None => Vec::new(),
    };
    let tenants = tenants
        .into_iter()
        .map(|t| TenantView {
            name: t.name,
            objects: t.objects,
            used_bytes: t.used_bytes,
            quota_bytes: (t.quota_bytes > 0).then_some(t.quota_bytes),
        })
        .collect();
    ClusterStatus {
        leader_id: leader.map(|m| m.leader_id),
        leader_addr: leader.map(|m| m.leader_addr.clone()),
        term: leader.map(|m| m.term),
        members,
        masters,
        tiers,
        duties,
        tenants,
        repairs_pending,
        hot_keys_fanned,
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[i]) }
}

/// The readable table.
pub fn render(status: &ClusterStatus) -> String {
    let mut out = String::new();
    let leader = match (&status.leader_id, &status.leader_addr) {
        (Some(id), Some(addr)) => format!("master {id} at {addr} (term {})", status.term.unwrap_or(0)),
        _ => "none known".into(),
    };
    let _ = writeln!(out, "leader: {leader}");
    let _ = writeln!(
        out,
        "\n{:<22} {:>4} {:<12} {:<5} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>21}",
        "MASTER",
        "ID",
        "ROLE",
        "READY",
        "TERM",
        "COMMIT",
        "APPLIED",
        "LAST LOG",
        "SEGMENTS",
        "OBJECTS",
        "CLIENTS",
        "USED / CAPACITY"
    );
    for m in &status.masters {
        if !m.reachable {
            let _ =
                writeln!(out, "{:<22} {:>4} {:<12} {}", m.addr, "-", "unreachable", m.error.as_deref().unwrap_or(""));
            continue;
        }
        let _ = writeln!(
            out,
            "{:<22} {:>4} {:<12} {:<5} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>21}",
            m.addr,
            m.node_id,
            m.role,
            if m.not_ready.is_none() { "yes" } else { "no" },
            m.term,
            m.commit_index,
            m.applied_index,
            m.last_log_index,
            m.segments,
            m.objects,
            m.clients,
            format!("{} / {}", human_bytes(m.used_bytes), human_bytes(m.capacity_bytes)),
        );
    }
    for m in status.masters.iter().filter(|m| m.reachable) {
        if let Some(why) = &m.not_ready {
            let _ = writeln!(out, "  master {} not ready: {why}", m.node_id);
        }
    }
    for m in status.masters.iter().filter(|m| m.planted_bugs) {
        let on = match m.planted_bugs_on.as_slice() {
            [] => "none on".to_string(),
            on => format!("ON: {}", on.join(", ")),
        };
        let _ = writeln!(
            out,
            "  master {} is a DEVELOPMENT BUILD with planted bugs ({on}); never run it in production",
            m.node_id
        );
    }
    if status.tiers.iter().any(|t| t.tier == "disk" && t.segments > 0) {
        let _ = writeln!(out, "\ntiers (leader's view):");
        for t in &status.tiers {
            let detached = match t.detached {
                0 => String::new(),
                n => format!(", {n} detached (store node down; kept for the grace)"),
            };
            let _ = writeln!(
                out,
                "  {:<7} {:>3} segments  {} / {}{detached}",
                t.tier,
                t.segments,
                human_bytes(t.used_bytes),
                human_bytes(t.capacity_bytes)
            );
        }
    }
    if !status.duties.is_empty() {
        let _ = writeln!(out, "\nduties (leader's):");
        let ago =
            |ms: Option<u64>| ms.map_or_else(|| "never".to_string(), |ms| format!("{:.1} s ago", ms as f64 / 1000.0));
        for d in &status.duties {
            let _ = write!(
                out,
                "  {:<14} every {:>5} ms  {:>7} rounds  last ok {:<12}",
                d.name,
                d.tick_ms,
                d.runs,
                ago(d.last_success_ms_ago)
            );
            let _ = match d.errors {
                0 => writeln!(out, "  no errors"),
                n => writeln!(out, "  {n} errors, last {}: {}", ago(d.last_error_ms_ago), d.last_error),
            };
        }
    }
    if status.repairs_pending > 0 {
        let _ = writeln!(out, "\nrepairs: {} objects wait for a lost replica to be made again", status.repairs_pending);
    }
    if status.hot_keys_fanned > 0 {
        let _ = writeln!(out, "\nhot keys: {} keys hold extra memory replicas while hot", status.hot_keys_fanned);
    }
    // Only once tenants are in use: a cluster of the default tenant alone
    // says nothing new here.
    if status.tenants.iter().any(|t| t.name != mooncake_client::Tenant::default().name() || t.quota_bytes.is_some()) {
        let _ = writeln!(out, "\ntenants:");
        for t in &status.tenants {
            let quota = t.quota_bytes.map_or_else(|| "no quota".to_string(), |q| format!("quota {}", human_bytes(q)));
            let _ =
                writeln!(out, "  {:<24} {:>9} objects  {:>10}  {quota}", t.name, t.objects, human_bytes(t.used_bytes));
        }
    }
    if !status.members.is_empty() {
        let _ = writeln!(out, "\nmembers (leader's view):");
        for m in &status.members {
            let lag = m.lag.map(|l| format!("lag {l}")).unwrap_or_else(|| "lag ?".into());
            let kind = if m.voter { "voter" } else { "learner" };
            let _ = writeln!(out, "  {:>3} {:<22} {:<9} {:<8} {}", m.id, m.addr, m.role, kind, lag);
        }
    }
    out
}
