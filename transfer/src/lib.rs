//! The transfer engine: moves object bytes between a local buffer and a
//! remote segment (TCP lanes, shared memory, RDMA behind a feature).
//!
//! Depends only on `segment`; knows nothing of Raft or the masters.
//! Not built yet: see issue "Data path".
