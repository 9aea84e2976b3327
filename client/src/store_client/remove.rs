//! Removing objects: one key, or every object (`RemoveAll`).

use super::Client;
use crate::error::ClientError;

impl Client {
    pub async fn remove(&self, key: &str, force: bool) -> Result<(), ClientError> {
        Ok(self.master.remove(key, force).await?)
    }

    pub async fn remove_all(&self, force: bool) -> Result<u64, ClientError> {
        Ok(self.master.remove_all(force).await?)
    }
}
