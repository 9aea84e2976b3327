//! Reading one object (the nearest replica first, verified, falling back
//! to the next), and asking whether a key exists and how large it is.

use std::sync::atomic::Ordering;

use mooncake_proto::master::{GetReplicaListResponse, Replica};

use crate::error::ClientError;

use super::{Client, list_error};

/// Memory before disk; within a tier same host first, then same zone,
/// then the rest. Among the nearest replicas, the one to try first moves
/// with `turn` (each read of a client takes the next): the reads of a hot
/// object spread evenly over its equally near replicas instead of all
/// landing on the one the master lists first (issue 39). The others follow
/// as fallbacks, nearest first.
pub(crate) fn rank_replicas<'a>(replicas: &'a [Replica], host: &str, zone: &str, turn: u64) -> Vec<&'a Replica> {
    let distance = |r: &Replica| {
        let on_disk = r.tier == mooncake_proto::master::Tier::Ssd as i32;
        let same_host = r.host_id == host;
        let same_zone = !zone.is_empty() && r.zone == zone;
        (on_disk, !same_host, !same_zone)
    };
    let mut v: Vec<&Replica> = replicas.iter().collect();
    v.sort_by_key(|r| distance(r));
    let nearest = v.first().map(|r| distance(r));
    let equals = v.iter().take_while(|r| Some(distance(r)) == nearest).count();
    if equals > 1 {
        v[..equals].rotate_left((turn % equals as u64) as usize);
    }
    v
}

impl Client {
    /// Reads `key` into `buf`; returns its size.
    pub async fn get_into(&self, key: &str, buf: &mut [u8]) -> Result<usize, ClientError> {
        let list = self.replica_list(key).await?;
        self.read_object(key, &list, buf).await
    }

    /// Reads `key` into a new buffer.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError> {
        let list = self.replica_list(key).await?;
        let mut buf = vec![0u8; list.size as usize];
        let n = self.read_object(key, &list, &mut buf).await?;
        buf.truncate(n);
        Ok(buf)
    }

    pub(super) async fn replica_list(&self, key: &str) -> Result<GetReplicaListResponse, ClientError> {
        match self.master.get_replica_list(self.client_id, key).await {
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ObjectNotFound) => {
                self.stats.gets_not_found.fetch_add(1, Ordering::Relaxed);
                Err(ClientError::NotFound(key.to_string()))
            }
            Err(e) => {
                self.stats.gets_failed.fetch_add(1, Ordering::Relaxed);
                Err(e.into())
            }
            Ok(list) => {
                self.stats.gets_found.fetch_add(1, Ordering::Relaxed);
                Ok(list)
            }
        }
    }

    /// Reads from the nearest replica whose bytes match the checksum (the
    /// one-buffer case of `read_object_parts`).
    pub(super) async fn read_object(
        &self,
        key: &str,
        list: &GetReplicaListResponse,
        buf: &mut [u8],
    ) -> Result<usize, ClientError> {
        self.read_object_parts(key, list, &mut [buf]).await
    }

    /// The replicas in the order this read tries them ([`rank_replicas`],
    /// at this client's next turn).
    pub(super) fn nearest_first<'a>(&self, replicas: &'a [Replica]) -> Vec<&'a Replica> {
        let turn = self.read_turn.fetch_add(1, Ordering::Relaxed);
        rank_replicas(replicas, &self.cfg.local_hostname, &self.cfg.zone, turn)
    }

    /// One batch item's replica-list status as a result, counted as a get
    /// found or not found.
    pub(super) fn list_status(
        &self,
        key: &str,
        list: &GetReplicaListResponse,
        attempts: u32,
    ) -> Result<(), ClientError> {
        match list_error(key, list, attempts) {
            Some(e @ ClientError::NotFound(_)) => {
                self.stats.gets_not_found.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            Some(e) => Err(e),
            None => {
                self.stats.gets_found.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    pub async fn exists(&self, key: &str) -> Result<bool, ClientError> {
        Ok(self.master.exist_key(key).await?)
    }

    pub async fn get_size(&self, key: &str) -> Result<u64, ClientError> {
        match self.master.get_size(key).await {
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ObjectNotFound) => {
                Err(ClientError::NotFound(key.to_string()))
            }
            other => Ok(other?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(segment: u64, host: &str, zone: &str, tier: mooncake_proto::master::Tier) -> Replica {
        Replica {
            segment_id: segment,
            host_id: host.into(),
            zone: zone.into(),
            tier: tier as i32,
            ..Default::default()
        }
    }

    /// Why: every client read a hot object from the replica the master
    /// listed first, so its other replicas served nothing.
    #[test]
    fn reads_turn_over_equally_near_replicas_and_never_pass_a_nearer_one() {
        use mooncake_proto::master::Tier::{Dram, Ssd};
        let far = [replica(1, "h1", "z1", Dram), replica(2, "h2", "z2", Dram), replica(3, "h3", "z1", Ssd)];
        let firsts: Vec<u64> = (0..6).map(|turn| rank_replicas(&far, "me", "", turn)[0].segment_id).collect();
        assert_eq!(firsts, [1, 2, 1, 2, 1, 2], "the two memory replicas take turns");
        assert!((0..6).all(|turn| rank_replicas(&far, "me", "", turn)[2].segment_id == 3), "disk stays last");
        // A same-host (or same-zone) replica is always read first.
        assert!((0..6).all(|turn| rank_replicas(&far, "h2", "", turn)[0].segment_id == 2));
        assert!((0..6).all(|turn| rank_replicas(&far, "me", "z2", turn)[0].segment_id == 2));
        // Three equally near: each first in a third of the reads.
        let three = [replica(1, "a", "", Dram), replica(2, "b", "", Dram), replica(3, "c", "", Dram)];
        let mut counts = [0; 3];
        for turn in 0..300 {
            counts[rank_replicas(&three, "me", "", turn)[0].segment_id as usize - 1] += 1;
        }
        assert_eq!(counts, [100, 100, 100]);
    }
}
