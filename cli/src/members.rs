//! `mooncake member add|remove|list`: change the master quorum through the
//! leader (add = learner, catch up, then voter).

use anyhow::Context;
use clap::Subcommand;
use mooncake_client::MasterClient;

use crate::status;

use crate::MastersArg;

#[derive(Subcommand)]
pub enum MemberOp {
    /// Add master ID at ADDR: it joins as a learner, catches up, then votes.
    Add {
        id: u64,
        addr: String,
        #[command(flatten)]
        masters: MastersArg,
    },
    /// Remove master ID (a voter or a learner) from the membership.
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

/// Members according to the leader: (id, voter).
async fn members(c: &MasterClient, m: &MastersArg) -> anyhow::Result<Vec<(u64, bool)>> {
    let s = status::gather(c, &m.masters).await;
    anyhow::ensure!(!s.members.is_empty(), "no leader answered among {:?}; is a quorum up?", m.masters);
    Ok(s.members.iter().map(|m| (m.id, m.voter)).collect())
}

/// Voters according to the leader.
async fn voters(c: &MasterClient, m: &MastersArg) -> anyhow::Result<Vec<u64>> {
    Ok(members(c, m).await?.into_iter().filter(|(_, voter)| *voter).map(|(id, _)| id).collect())
}

pub async fn run(op: MemberOp) -> anyhow::Result<()> {
    match op {
        MemberOp::Add { id, addr, masters } => {
            let c = masters.client()?;
            println!("{}", c.add_learner(id, &addr).await.context("adding learner")?);
            let mut v = voters(&c, &masters).await?;
            v.push(id);
            println!("{}", c.change_membership(v, false).await.context("promoting to voter")?);
        }
        MemberOp::Remove { id, masters } => {
            let c = masters.client()?;
            let all = members(&c, &masters).await?;
            match all.iter().find(|(m, _)| *m == id) {
                None => {
                    let ids: Vec<u64> = all.iter().map(|(m, _)| *m).collect();
                    anyhow::bail!("master {id} is not a member (members: {ids:?}); nothing to remove")
                }
                Some((_, true)) => {
                    let v: Vec<u64> = all.iter().filter(|(m, voter)| *voter && *m != id).map(|(m, _)| *m).collect();
                    println!("{}", c.change_membership(v, false).await.context("removing voter")?);
                }
                Some((_, false)) => println!("{}", c.remove_learner(id).await.context("removing learner")?),
            }
        }
        MemberOp::List { masters, json } => {
            let c = masters.client()?;
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
