//! Live pollers: lifecycle, mailboxes, idle policy and timers. One test binary, one
//! module per former file. The allocation counter (`no_alloc`) is a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod lifecycle;
mod mailbox;
mod wakeup;
