//! The NFSv4.1 server's side of the backchannel (RFC 8881 §2.10.3.1, §18.36, §20): after
//! a CREATE_SESSION that asked for a backchannel on its connection
//! (`CREATE_SESSION4_FLAG_CONN_BACK_CHAN`), the server probes it with CB_NULL, the way
//! it learns the callback path works before it would rely on it (delegations). The call
//! names the program the client gave in `csa_cb_program`, version 1 (the NFS4_CALLBACK
//! program's only version), AUTH_NONE (a client's callback service accepts AUTH_NONE
//! for CB_NULL), and goes out on the connection the CREATE_SESSION came in on, through
//! the engine's backward direction (RFC 8167).
//!
//! The COMPOUND that carries CREATE_SESSION is run by the shared program, which knows no
//! connection; it leaves the request in a per-thread mailbox that the connection's
//! [`NfsService`](super::NfsService), which called the program on this same thread,
//! empties right after (`take_request`). Nothing else runs on the thread in between.

use std::cell::Cell;

/// CB_NULL: the callback program's NULL procedure.
pub const CB_NULL: u32 = 0;
/// CB_COMPOUND.
pub const CB_COMPOUND: u32 = 1;
/// The callback program's version for NFSv4.1 (RFC 8881 §20).
pub const CB_VERSION: u32 = 1;

thread_local! {
    /// A CREATE_SESSION run on this thread asked for a backchannel: its
    /// `csa_cb_program`.
    static REQUESTED: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Called by CREATE_SESSION when it granted `CONN_BACK_CHAN`.
pub(crate) fn request(cb_program: u32) {
    REQUESTED.with(|r| r.set(Some(cb_program)));
}

/// The backchannel request left by the COMPOUND just run on this thread, if any.
pub(crate) fn take_request() -> Option<u32> {
    REQUESTED.with(Cell::take)
}

/// Octets of a CB_NULL call.
pub const CB_NULL_LEN: usize = 40;

/// Writes a CB_NULL call to `cb_program` into `out` (the XID is left zero: the engine
/// assigns it). Returns its length, or `None` when `out` is too short.
pub fn encode_cb_null(cb_program: u32, out: &mut [u8]) -> Option<usize> {
    // xid, CALL, rpcvers 2, program, version, procedure, cred AUTH_NONE (flavor,
    // length), verf AUTH_NONE.
    let words = [0, 0, 2, cb_program, CB_VERSION, CB_NULL, 0, 0, 0, 0];
    let out = out.get_mut(..CB_NULL_LEN)?;
    for (w, o) in words.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&u32::to_be_bytes(*w));
    }
    Some(CB_NULL_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cb_null_names_the_clients_program() {
        let mut b = [0xffu8; 64];
        assert_eq!(encode_cb_null(0x4000_0001, &mut b), Some(40));
        let w = |i: usize| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        assert_eq!((w(1), w(2), w(3), w(4), w(5)), (0, 2, 0x4000_0001, 1, 0));
        assert_eq!((w(6), w(7), w(8), w(9)), (0, 0, 0, 0));
        assert_eq!(encode_cb_null(1, &mut [0u8; 39]), None);
    }

    #[test]
    fn the_mailbox_is_taken_once() {
        assert_eq!(take_request(), None);
        request(7);
        assert_eq!(take_request(), Some(7));
        assert_eq!(take_request(), None);
    }
}
