//! Who may call what on a master. Admin operations (membership, client
//! eviction, snapshots, forced removals) need the admin identity: a client
//! certificate naming the admin role (mutual TLS), or the admin token
//! derived from the cluster secret (`mooncake_auth::admin`) in the
//! request's metadata. Checked on whichever master receives the call, before
//! anything else (a follower refuses too, rather than redirecting an
//! unauthenticated caller to the leader).

use mooncake_auth::admin::{ADMIN_TOKEN_HEADER, AdminToken, token_matches};
use mooncake_proto::{ErrorCode, Status};

/// The identities this master recognises.
pub struct Roles {
    admin_token: AdminToken,
}

impl Roles {
    pub fn new(admin_token: AdminToken) -> Self {
        Roles { admin_token }
    }

    /// Ok when `req` comes from an admin; PERMISSION_DENIED naming `what`
    /// and how to become one otherwise.
    pub fn require_admin<T>(&self, req: &tonic::Request<T>, what: &str) -> Result<(), Status> {
        if crate::rpc::peer::peer_role(req) == Some(mooncake_tls::Role::Admin) {
            return Ok(());
        }
        let presented = req.metadata().get(ADMIN_TOKEN_HEADER).and_then(|v| v.to_str().ok());
        match presented {
            Some(t) if token_matches(self.admin_token.as_str(), t) => Ok(()),
            Some(_) => Err(denied(what, "the admin token presented is not this cluster's")),
            None => Err(denied(what, "no admin token was presented")),
        }
    }
}

fn denied(what: &str, why: &str) -> Status {
    Status::with(
        ErrorCode::PermissionDenied,
        format!(
            "{what} is an admin operation and {why}: pass --admin-token-file FILE (every master writes admin.token \
             in its data dir; `mooncake up` writes one in its cluster dir), set MOONCAKE_ADMIN_TOKEN_FILE, or use \
             an admin TLS certificate"
        ),
    )
}
