//! What only the edge keeps, beside the state every part shares: who may
//! call what ([`Roles`]), the open `Watch` streams ([`Watchers`]), the
//! states of paged listings ([`Listings`]), and the planted bug that acts
//! in the default tenant whatever a call names. Built once per master
//! (`node/`) and held by the client and admin services.

use std::sync::Arc;

use crate::rpc::listings::Listings;
use crate::rpc::roles::Roles;
use crate::rpc::watch::Watchers;

pub struct Edge {
    /// Who may call what (admin operations).
    pub roles: Roles,
    /// The open `Watch` streams, against `--max-watchers`.
    pub watchers: Arc<Watchers>,
    /// The states of paged listings, for their later pages.
    pub listings: Listings,
    /// `--dev-unsafe-ignore-tenants` (a planted bug, `node/planted.rs`):
    /// every call acts in the default tenant, whatever it names.
    pub ignore_tenants: bool,
}
