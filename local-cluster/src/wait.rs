//! [`wait_for`]: polling a condition with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `cond` every 20 ms until it returns `Some`, or fails after
/// `timeout`. The condition is the event; the interval bounds how late we see it.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut cond: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = cond().await {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
