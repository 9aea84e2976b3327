//! The `mooncake` command-line tool.

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use mooncake_client::{MasterClient, MasterClientConfig, status};

#[derive(Parser)]
#[command(name = "mooncake", version, about = "mooncake-rs: a KV-cache store with a Raft-replicated master")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct MastersArg {
    /// Master addresses, comma separated (`host:port,host:port`).
    #[arg(long, env = "MOONCAKE_MASTERS", value_delimiter = ',', default_value = "127.0.0.1:50051")]
    masters: Vec<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show members, leader, term, commit index, segments and objects.
    Status {
        #[command(flatten)]
        masters: MastersArg,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Refresh every N seconds until interrupted.
        #[arg(long, value_name = "SECONDS")]
        watch: Option<u64>,
    },
    /// Change the master quorum.
    Member {
        #[command(subcommand)]
        op: MemberOp,
    },
}

#[derive(Subcommand)]
enum MemberOp {
    /// Add master ID at ADDR: it joins as a learner, catches up, then votes.
    Add {
        id: u64,
        addr: String,
        #[command(flatten)]
        masters: MastersArg,
    },
    /// Remove master ID from the voters.
    Remove {
        id: u64,
        #[command(flatten)]
        masters: MastersArg,
    },
    /// List the members as the leader sees them.
    List {
        #[command(flatten)]
        masters: MastersArg,
        #[arg(long)]
        json: bool,
    },
}

fn client(m: &MastersArg) -> anyhow::Result<MasterClient> {
    Ok(MasterClient::new(MasterClientConfig::new(m.masters.clone()))?)
}

async fn show_status(m: &MastersArg, json: bool) -> anyhow::Result<status::ClusterStatus> {
    let c = client(m)?;
    let s = status::gather(&c, &m.masters).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", status::render(&s));
    }
    Ok(s)
}

/// Voters according to the leader.
async fn voters(c: &MasterClient, m: &MastersArg) -> anyhow::Result<Vec<u64>> {
    let s = status::gather(c, &m.masters).await;
    anyhow::ensure!(!s.members.is_empty(), "no leader answered among {:?}; is a quorum up?", m.masters);
    Ok(s.members.iter().filter(|m| m.voter).map(|m| m.id).collect())
}

async fn member(op: MemberOp) -> anyhow::Result<()> {
    match op {
        MemberOp::Add { id, addr, masters } => {
            let c = client(&masters)?;
            println!("{}", c.add_learner(id, &addr).await.context("adding learner")?);
            let mut v = voters(&c, &masters).await?;
            v.push(id);
            println!("{}", c.change_membership(v, false).await.context("promoting to voter")?);
        }
        MemberOp::Remove { id, masters } => {
            let c = client(&masters)?;
            let v: Vec<u64> = voters(&c, &masters).await?.into_iter().filter(|x| *x != id).collect();
            println!("{}", c.change_membership(v, false).await.context("removing voter")?);
        }
        MemberOp::List { masters, json } => {
            let c = client(&masters)?;
            let s = status::gather(&c, &masters.masters).await;
            if json {
                println!("{}", serde_json::to_string_pretty(&s.members)?);
            } else {
                for m in &s.members {
                    println!("{:>3} {:<22} {:<9} {}", m.id, m.addr, m.role, if m.voter { "voter" } else { "learner" });
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Status { masters, json, watch } => match watch {
            None => {
                let s = show_status(&masters, json).await?;
                anyhow::ensure!(s.leader_id.is_some(), "no leader known");
            }
            Some(secs) => loop {
                if !json {
                    print!("\x1b[2J\x1b[H");
                }
                show_status(&masters, json).await?;
                tokio::time::sleep(Duration::from_secs(secs.max(1))).await;
            },
        },
        Cmd::Member { op } => member(op).await?,
    }
    Ok(())
}
