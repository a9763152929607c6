//! What the raw iWARP peers of the siw tests share: non-blocking socket I/O with a
//! deadline, so a peer that stops reading fails the test instead of hanging it.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The longest a raw peer waits for its socket to take a write.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// Writes all of `b` to the non-blocking `sock`, yielding while it is full.
pub fn write_all(sock: &mut TcpStream, mut b: &[u8]) {
    let end = Instant::now() + WRITE_DEADLINE;
    while !b.is_empty() {
        match sock.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < end, "raw peer cannot write");
                std::thread::yield_now();
            }
            Err(e) => panic!("raw peer write: {e}"),
        }
    }
}

/// Appends whatever has arrived on the non-blocking `sock` to `inbox`, without waiting.
/// Returns true once the stream has ended (closed, reset or failed).
pub fn fill(sock: &mut TcpStream, inbox: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 65536];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => inbox.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}
