//! Connection-level events a core reports to its driver.

use core::time::Duration;

use super::transport::CloseReason;
use crate::wire::private_data::InlineThresholds;

/// Something the driver (or the application behind it) may want to know about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent {
    /// The connection is up, with these inline thresholds and remote-invalidation
    /// setting (RFC 8797).
    Established(InlineThresholds),
    /// A keepalive probe was answered after this long.
    ProbeAnswered(Duration),
    /// A keepalive probe went unanswered: the peer is considered dead and the connection
    /// is being torn down.
    PeerDead,
    /// The core wants the connection disconnected (the driver asks the CM).
    DisconnectRequested(CloseReason),
    /// Everything is drained and released.
    Closed(CloseReason),
}
