//! Existence without KV leases (upstream 0.3.14's `batch_probe_key`): a
//! lookup that pins nothing, so a framework probing every candidate block
//! of a prompt does not keep eviction from making room for the next put.
//! [`ProbePolicy::LastHitOnly`] then leases the one group of keys the
//! caller is about to load ([`lease_group`] chooses it; a pure function).

use std::ops::Range;

use crate::codes::Code;
use crate::session::Session;

/// Which probed keys get a KV lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbePolicy {
    /// None: a point-in-time answer; a found key may be evicted before it is read.
    None,
    /// The last group of `candidate_size` keys that are all hits (see
    /// [`lease_group`]) is leased, as `batch_is_exist` leases a key found.
    LastHitOnly { candidate_size: usize },
}

impl ProbePolicy {
    /// The policy of `batch_probe_key(keys, policy, candidate_size)`, or
    /// why not (the bindings raise it as `ValueError`, as upstream does).
    /// Names are upstream's, compared without regard to case.
    pub fn parse(policy: &str, candidate_size: i64) -> Result<ProbePolicy, String> {
        let size = usize::try_from(candidate_size)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("batch_probe_key candidate_size must be at least 1, got {candidate_size}"))?;
        match policy.to_ascii_lowercase().as_str() {
            "none" => Ok(ProbePolicy::None),
            "lasthitonly" => Ok(ProbePolicy::LastHitOnly { candidate_size: size }),
            _ => Err(format!("Unknown batch_probe_key policy: {policy} (expected \"none\" or \"LastHitOnly\")")),
        }
    }
}

/// The keys `LastHitOnly` leases, given the lease-free answers: the
/// `candidate_size` keys that end at the last hit of the leading run of
/// hits (the longest stored prefix, which is what a prefix cache loads),
/// all of them hits by construction. `None` when that run is shorter than
/// `candidate_size`: no complete group, nothing leased.
pub fn lease_group(found: &[Code], candidate_size: usize) -> Option<Range<usize>> {
    let prefix = found.iter().take_while(|c| **c == 1).count();
    (candidate_size >= 1 && prefix >= candidate_size).then(|| prefix - candidate_size..prefix)
}

impl Session {
    /// Per key 1 (found), 0 (not found), -1 (the masters could not say),
    /// as [`batch_exists`](Session::batch_exists), leasing only what
    /// `policy` selects.
    pub fn batch_probe(&self, keys: &[String], policy: ProbePolicy) -> Vec<Code> {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut found = self.block_on(self.client().batch_probe(&names)).iter().map(existence).collect::<Vec<_>>();
        if let ProbePolicy::LastHitOnly { candidate_size } = policy
            && let Some(group) = lease_group(&found, candidate_size)
        {
            // The leasing call's answers replace the probe's: a key it
            // finds is leased, one evicted in between is a 0 (never a 1
            // that no lease protects).
            let leased = self.block_on(self.client().batch_exists(&names[group.clone()]));
            for (slot, answer) in found[group].iter_mut().zip(&leased) {
                *slot = existence(answer);
            }
        }
        found
    }
}

/// An existence answer as Mooncake's `batch_is_exist` code.
fn existence(r: &Result<bool, mooncake_client::ClientError>) -> Code {
    r.as_ref().map_or(-1, |found| Code::from(*found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_ends_at_the_last_hit_of_the_leading_run() {
        assert_eq!(lease_group(&[1, 1, 1, 1, 0, 1, 1], 2), Some(2..4), "hits after the first miss do not count");
        assert_eq!(lease_group(&[1, 1, 1], 1), Some(2..3), "candidate_size 1: the last hit alone");
        assert_eq!(lease_group(&[1, 1, 1], 3), Some(0..3));
        assert_eq!(lease_group(&[1, 0, 1, 1], 2), None, "no complete group in the leading run");
        assert_eq!(lease_group(&[0, 1, 1], 1), None);
        assert_eq!(lease_group(&[-1, 1], 1), None, "an error ends the run as a miss does");
        assert_eq!(lease_group(&[], 1), None);
    }

    #[test]
    fn policies_are_upstreams_names_and_sizes_start_at_one() {
        assert_eq!(ProbePolicy::parse("none", 1), Ok(ProbePolicy::None));
        assert_eq!(ProbePolicy::parse("LastHitOnly", 4), Ok(ProbePolicy::LastHitOnly { candidate_size: 4 }));
        assert_eq!(ProbePolicy::parse("lasthitonly", 1), Ok(ProbePolicy::LastHitOnly { candidate_size: 1 }));
        assert!(ProbePolicy::parse("LongestPrefix", 1).unwrap_err().starts_with("Unknown batch_probe_key policy: "));
        assert!(ProbePolicy::parse("none", 0).unwrap_err().contains("candidate_size"));
        assert!(ProbePolicy::parse("LastHitOnly", -3).unwrap_err().contains("-3"));
    }
}
