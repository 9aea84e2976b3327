//! mooncake-py: the Python package `mooncake_rs` (module `mooncake_rs.store`),
//! a drop-in for Mooncake's `mooncake.store.MooncakeDistributedStore`, built
//! on the Rust client. The Rust side is plain Rust and tested without Python:
//! [`session`] (setup, close, the runtime), [`objects`] and [`batches`] (the
//! calls, in Mooncake's return codes), [`probe`] (existence without KV
//! leases), [`buffers`] (registered memory),
//! [`pool`] (the local buffer), [`sessions`] (put and get sessions), [`setup`] (arguments), [`codes`] (the one
//! error mapping), [`events`] (`store.watch`), [`tasks`] (copy and move tasks, prefetch). The PyO3 layer in `py` (feature `python`) only converts
//! arguments and releases the GIL around each call.
//!
//! Depends on `client` (and the types it speaks); never on `master`.

pub mod batches;
pub mod buffers;
pub mod codes;
pub mod events;
pub mod objects;
pub mod pool;
pub mod probe;
pub mod session;
pub mod sessions;
pub mod setup;
pub mod standalone;
pub mod tasks;
pub mod waiter;

#[cfg(feature = "python")]
mod py;
