//! `mooncake tenant set NAME --quota SIZE` and `mooncake tenant ls`: the
//! tenants' quotas and usage (docs/TENANTS.md). Setting a quota is an admin
//! operation.

use anyhow::Context;
use clap::Subcommand;

use crate::MastersArg;

#[derive(Subcommand)]
pub enum TenantOp {
    /// Set tenant NAME's quota: the bytes of objects it may keep (each
    /// counted once, at its size). A put past it first evicts the
    /// tenant's own objects; `0` or `none` removes the quota.
    Set {
        name: String,
        /// A size (`64GiB`, `500MB`, bytes), or `none`.
        #[arg(long)]
        quota: String,
        #[command(flatten)]
        masters: MastersArg,
    },
    /// Every tenant with objects or a quota: objects, bytes used, quota.
    Ls {
        #[command(flatten)]
        masters: MastersArg,
        #[arg(long)]
        json: bool,
    },
}

/// `none` (or 0) is no quota; otherwise a size.
fn parse_quota(s: &str) -> anyhow::Result<u64> {
    match s.trim() {
        "none" => Ok(0),
        size => mooncake_client::parse_size(size)
            .map_err(|e| anyhow::anyhow!("--quota {s:?}: {e}; give a size such as 64GiB, or none")),
    }
}

pub async fn run(op: TenantOp) -> anyhow::Result<()> {
    match op {
        TenantOp::Set { name, quota, masters } => {
            let bytes = parse_quota(&quota)?;
            let detail = masters
                .client()?
                .set_tenant_quota(&name, bytes)
                .await
                .with_context(|| format!("setting the quota of {name:?}"))?;
            println!("{detail}");
        }
        TenantOp::Ls { masters, json } => {
            let tenants = masters.client()?.list_tenants().await.context("listing the tenants")?;
            if json {
                let rows: Vec<_> = tenants
                    .iter()
                    .map(|t| {
                        serde_json::json!({"tenant": t.name, "objects": t.objects, "used_bytes": t.used_bytes,
                            "quota_bytes": (t.quota_bytes > 0).then_some(t.quota_bytes)})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!("{:<24} {:>10} {:>16} {:>16} {:>6}", "TENANT", "OBJECTS", "USED", "QUOTA", "USE");
            for t in &tenants {
                let (quota, share) = match t.quota_bytes {
                    0 => ("none".to_string(), "-".to_string()),
                    q => (q.to_string(), format!("{:.0}%", 100.0 * t.used_bytes as f64 / q as f64)),
                };
                println!("{:<24} {:>10} {:>16} {:>16} {:>6}", t.name, t.objects, t.used_bytes, quota, share);
            }
            println!("{} tenants", tenants.len());
        }
    }
    Ok(())
}
