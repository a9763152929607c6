//! Translation of verbs completion statuses and opcodes into the fabric's vocabulary.

use rdma_sys::{ibv_wc_opcode, ibv_wc_status};

use crate::fabric::{WcOpcode, WcStatus};

/// The fabric status for a verbs `ibv_wc_status`.
///
/// Statuses of the reliable-datagram and tag-matching transports cannot occur on the RC
/// queue pairs this provider creates; they and any value a newer rdma-core may add map to
/// [`WcStatus::GeneralError`] rather than being guessed at.
pub fn wc_status(status: ibv_wc_status::Type) -> WcStatus {
    use ibv_wc_status::*;
    match status {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        IBV_WC_LOC_QP_OP_ERR => WcStatus::LocalQpOperationError,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtectionError,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushed,
        IBV_WC_MW_BIND_ERR => WcStatus::MemoryBindError,
        IBV_WC_BAD_RESP_ERR => WcStatus::BadResponse,
        IBV_WC_LOC_ACCESS_ERR => WcStatus::LocalAccessError,
        IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_INV_RD_REQ_ERR => WcStatus::RemoteInvalidRequest,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        IBV_WC_REM_OP_ERR | IBV_WC_REM_ABORT_ERR => WcStatus::RemoteOperationError,
        IBV_WC_RETRY_EXC_ERR | IBV_WC_RESP_TIMEOUT_ERR => WcStatus::RetryExceeded,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        IBV_WC_FATAL_ERR => WcStatus::FatalError,
        // LOC_EEC_OP_ERR, LOC_RDD_VIOL_ERR, INV_EECN_ERR, INV_EEC_STATE_ERR (reliable
        // datagram), TM_ERR, TM_RNDV_INCOMPLETE (tag matching), GENERAL_ERR, unknown.
        _ => WcStatus::GeneralError,
    }
}

/// The fabric opcode for a verbs `ibv_wc_opcode`, for successful completions only (verbs
/// leaves the opcode undefined on errors; the provider keeps its own record for those).
pub fn wc_opcode(opcode: ibv_wc_opcode::Type) -> Option<WcOpcode> {
    use ibv_wc_opcode::*;
    Some(match opcode {
        IBV_WC_SEND => WcOpcode::Send,
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_BIND_MW => WcOpcode::FastReg,
        IBV_WC_LOCAL_INV => WcOpcode::LocalInvalidate,
        IBV_WC_RECV => WcOpcode::Recv,
        _ => return None,
    })
}

/// Every fabric status, indexed by [`status_code`].
const STATUSES: [WcStatus; 15] = [
    WcStatus::Success,
    WcStatus::LocalLengthError,
    WcStatus::LocalQpOperationError,
    WcStatus::LocalProtectionError,
    WcStatus::WrFlushed,
    WcStatus::MemoryBindError,
    WcStatus::BadResponse,
    WcStatus::LocalAccessError,
    WcStatus::RemoteInvalidRequest,
    WcStatus::RemoteAccessError,
    WcStatus::RemoteOperationError,
    WcStatus::RetryExceeded,
    WcStatus::RnrRetryExceeded,
    WcStatus::FatalError,
    WcStatus::GeneralError,
];

/// A byte for `s`, so a status fits in an atomic slot.
pub(crate) fn status_code(s: WcStatus) -> u8 {
    // Every status is in the table.
    STATUSES
        .iter()
        .position(|&x| x == s)
        .unwrap_or(STATUSES.len() - 1) as u8
}

/// The status of a [`status_code`] byte.
pub(crate) fn code_status(c: u8) -> WcStatus {
    STATUSES
        .get(usize::from(c))
        .copied()
        .unwrap_or(WcStatus::GeneralError)
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_codes_round_trip() {
        for s in super::STATUSES {
            assert_eq!(super::code_status(super::status_code(s)), s);
        }
        assert_eq!(super::code_status(200), super::WcStatus::GeneralError);
    }

    use super::*;

    #[test]
    fn every_rc_status_has_its_own_meaning() {
        use ibv_wc_status::*;
        let table = [
            (IBV_WC_SUCCESS, WcStatus::Success),
            (IBV_WC_LOC_LEN_ERR, WcStatus::LocalLengthError),
            (IBV_WC_LOC_QP_OP_ERR, WcStatus::LocalQpOperationError),
            (IBV_WC_LOC_PROT_ERR, WcStatus::LocalProtectionError),
            (IBV_WC_WR_FLUSH_ERR, WcStatus::WrFlushed),
            (IBV_WC_MW_BIND_ERR, WcStatus::MemoryBindError),
            (IBV_WC_BAD_RESP_ERR, WcStatus::BadResponse),
            (IBV_WC_LOC_ACCESS_ERR, WcStatus::LocalAccessError),
            (IBV_WC_REM_INV_REQ_ERR, WcStatus::RemoteInvalidRequest),
            (IBV_WC_REM_ACCESS_ERR, WcStatus::RemoteAccessError),
            (IBV_WC_REM_OP_ERR, WcStatus::RemoteOperationError),
            (IBV_WC_RETRY_EXC_ERR, WcStatus::RetryExceeded),
            (IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExceeded),
            (IBV_WC_FATAL_ERR, WcStatus::FatalError),
            (IBV_WC_GENERAL_ERR, WcStatus::GeneralError),
            (IBV_WC_RESP_TIMEOUT_ERR, WcStatus::RetryExceeded),
            (IBV_WC_REM_ABORT_ERR, WcStatus::RemoteOperationError),
            (IBV_WC_LOC_RDD_VIOL_ERR, WcStatus::GeneralError),
            (999, WcStatus::GeneralError),
        ];
        for (verbs, fabric) in table {
            assert_eq!(wc_status(verbs), fabric, "ibv_wc_status {verbs}");
        }
    }

    #[test]
    fn opcodes_map_and_unknown_ones_do_not() {
        use ibv_wc_opcode::*;
        assert_eq!(wc_opcode(IBV_WC_SEND), Some(WcOpcode::Send));
        assert_eq!(wc_opcode(IBV_WC_RDMA_WRITE), Some(WcOpcode::RdmaWrite));
        assert_eq!(wc_opcode(IBV_WC_RDMA_READ), Some(WcOpcode::RdmaRead));
        assert_eq!(wc_opcode(IBV_WC_BIND_MW), Some(WcOpcode::FastReg));
        assert_eq!(wc_opcode(IBV_WC_LOCAL_INV), Some(WcOpcode::LocalInvalidate));
        assert_eq!(wc_opcode(IBV_WC_RECV), Some(WcOpcode::Recv));
        assert_eq!(wc_opcode(IBV_WC_COMP_SWAP), None);
    }
}
