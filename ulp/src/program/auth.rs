//! [`AuthPolicy`]: which credential flavors the dispatcher lets through to programs.

use crate::rpc::{AuthStat, OpaqueAuth};

/// Which credential flavors a [`Dispatcher`](super::Dispatcher) accepts.
///
/// Malformed credentials never get this far: the header decoder already answers them
/// with AUTH_BADCRED or AUTH_BADVERF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthPolicy {
    /// Accept AUTH_NONE.
    pub none: bool,
    /// Accept AUTH_SYS.
    pub sys: bool,
    /// Pass any other flavor (AUTH_DH, RPCSEC_GSS, ...) through uninterpreted, for a
    /// program that checks it itself.
    pub other: bool,
}

impl AuthPolicy {
    /// AUTH_NONE and AUTH_SYS; nothing else.
    pub const DEFAULT: AuthPolicy = AuthPolicy {
        none: true,
        sys: true,
        other: false,
    };

    /// Decides whether a call with these credentials may proceed.
    ///
    /// A refused flavor is AUTH_BADCRED: RFC 5531 has no status for "flavor not
    /// supported", and a credential the server cannot validate is, to it, a bad one.
    /// AUTH_NONE and AUTH_SYS calls must carry an AUTH_NONE verifier (RFC 5531 §10.1 and
    /// Appendix A give neither flavor a verifier of its own); anything else is
    /// AUTH_BADVERF.
    pub fn check(&self, cred: &OpaqueAuth<'_>, verf: &OpaqueAuth<'_>) -> Result<(), AuthStat> {
        let (allowed, own_verifier) = match cred {
            OpaqueAuth::None => (self.none, false),
            OpaqueAuth::Sys(_) => (self.sys, false),
            OpaqueAuth::Raw { .. } => (self.other, true),
        };
        if !allowed {
            return Err(AuthStat::BadCred);
        }
        if !own_verifier && *verf != OpaqueAuth::None {
            return Err(AuthStat::BadVerf);
        }
        Ok(())
    }
}

impl Default for AuthPolicy {
    fn default() -> Self {
        AuthPolicy::DEFAULT
    }
}
