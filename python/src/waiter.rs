//! [`block_on`]: runs a future to completion on the calling thread, spinning
//! briefly before it sleeps. A call waits on the network a few times
//! (master, store node); waking a sleeping thread costs tens of
//! microseconds on a VM (an idle vCPU must be woken), about as much as the
//! round trip itself. So the first [`SPINNERS_MAX`] waiting threads poll a
//! flag for up to [`SPIN_MAX`] (yielding the CPU between checks, so the
//! runtime's workers still run) before they park; other threads park at once.
//! `MOONCAKE_SPIN_US` sets the spin (0: never spin, for hosts short of CPU).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

/// How long a waiting thread spins before it parks: a bit more than a
/// loopback round trip through a master or a store node.
pub const SPIN_MAX: Duration = Duration::from_micros(200);

/// The variable that overrides [`SPIN_MAX`] (microseconds).
pub const SPIN_ENV: &str = "MOONCAKE_SPIN_US";

/// The longest spin `MOONCAKE_SPIN_US` may ask for.
pub const SPIN_LIMIT: Duration = Duration::from_millis(10);

/// Threads spinning at once, at most. More would take the CPUs from the
/// runtime's workers and from the servers they wait for.
pub const SPINNERS_MAX: usize = 1;

static SPINNERS: AtomicUsize = AtomicUsize::new(0);

/// Wakes the thread that waits on the future.
struct Signal {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::Release) {
            self.thread.unpark();
        }
    }
}

/// Polls `fut` on this thread inside `rt`'s context (its I/O and timers
/// are driven by the runtime's workers) until it completes.
pub fn block_on<F: Future>(rt: &Runtime, fut: F) -> F::Output {
    let _context = rt.enter();
    let signal = Arc::new(Signal { woken: AtomicBool::new(false), thread: std::thread::current() });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        wait(&signal);
    }
}

/// Returns once `signal` was woken (and clears it).
fn wait(signal: &Signal) {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    let spin = *SPIN.get_or_init(|| {
        let micros = std::env::var(SPIN_ENV).ok().and_then(|v| v.parse::<u64>().ok());
        micros.map_or(SPIN_MAX, |us| Duration::from_micros(us).min(SPIN_LIMIT))
    });
    if SPINNERS.fetch_add(1, Ordering::AcqRel) < SPINNERS_MAX {
        let start = Instant::now();
        while start.elapsed() < spin {
            if signal.woken.swap(false, Ordering::Acquire) {
                SPINNERS.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            std::thread::yield_now();
        }
    }
    SPINNERS.fetch_sub(1, Ordering::AcqRel);
    while !signal.woken.swap(false, Ordering::Acquire) {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futures_complete_across_wakes_from_the_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        let got = block_on(&rt, async {
            let mut sum = 0u64;
            for i in 0..20u64 {
                tokio::time::sleep(Duration::from_micros(if i % 2 == 0 { 10 } else { 2_000 })).await;
                sum += tokio::spawn(async move { i }).await.expect("task");
            }
            sum
        });
        assert_eq!(got, 190);
        // Several threads at once: one may spin, the others park.
        let rt = std::sync::Arc::new(rt);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let rt = rt.clone();
                std::thread::spawn(move || {
                    block_on(&rt, async move {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        t
                    })
                })
            })
            .collect();
        assert_eq!(threads.into_iter().map(|t| t.join().expect("join")).sum::<u64>(), 6);
    }
}
