//! Reading one object (the nearest replica first, verified, falling back
//! to the next), and asking whether a key exists and how large it is.

use std::sync::atomic::Ordering;

use mooncake_proto::master::{GetReplicaListResponse, Replica};

use crate::error::ClientError;

use super::{Client, list_error};

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

    /// Memory before disk; within a tier same host first, then same zone,
    /// then the rest (stable within groups).
    pub(super) fn nearest_first<'a>(&self, replicas: &'a [Replica]) -> Vec<&'a Replica> {
        let mut v: Vec<&Replica> = replicas.iter().collect();
        v.sort_by_key(|r| {
            let on_disk = r.tier == mooncake_proto::master::Tier::Ssd as i32;
            let same_host = r.host_id == self.cfg.local_hostname;
            let same_zone = !self.cfg.zone.is_empty() && r.zone == self.cfg.zone;
            (on_disk, !same_host, !same_zone)
        });
        v
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
