//! How a requester registers chunk memory is visible and refusable: an explicit
//! `Registration::FastReg` on a device without fast registration is a typed error (not a
//! silent fall-back), and `Auto` there picks persistent registration and says so in the
//! connection's stats.

use rpcrdma::fabric::sim::{Sim, SimAddr, SimConfig, SimNet};
use rpcrdma::{ConfigError, ConnConfig, RegMode, Registration};
use rpcrdma::{ConnError, Requester};
use rpcrdma_pools::HugePages;

fn config(registration: Registration) -> ConnConfig {
    ConnConfig {
        credits: 4,
        large_buf_size: 64 * 1024,
        large_bufs: 8,
        send_bufs: 16,
        queue_len: 8,
        hugepages: HugePages::Never,
        registration,
        ..ConnConfig::default()
    }
}

fn net(fast_reg: bool) -> SimNet {
    let mut cfg = SimConfig::seeded(20);
    cfg.caps.fast_reg = fast_reg;
    SimNet::new(cfg)
}

#[test]
fn fastreg_on_a_device_without_it_is_a_typed_error() {
    let net = net(false);
    let dev = net.open_device();
    let r = Requester::<Sim>::connect_with(&dev, &SimAddr(1), &config(Registration::FastReg));
    match r {
        Err(ConnError::Config(ConfigError::FastRegUnsupported)) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("FastReg accepted on a device without fast registration"),
    }
    let msg = ConnError::Config(ConfigError::FastRegUnsupported).to_string();
    assert!(msg.contains("no fast registration"), "{msg}");
}

#[test]
fn auto_picks_persistent_without_fast_registration_and_says_so() {
    for (fast_reg, registration, want) in [
        (false, Registration::Auto, RegMode::Persistent),
        (false, Registration::Persistent, RegMode::Persistent),
        (true, Registration::Auto, RegMode::FastReg),
        (true, Registration::Persistent, RegMode::Persistent),
        (true, Registration::FastReg, RegMode::FastReg),
    ] {
        let net = net(fast_reg);
        let dev = net.open_device();
        let conn = Requester::<Sim>::connect_with(&dev, &SimAddr(1), &config(registration))
            .expect("connect starts");
        assert_eq!(conn.registration(), want, "{registration:?}");
        assert_eq!(
            conn.stats().persistent_registration,
            want == RegMode::Persistent,
            "{registration:?} on fast_reg={fast_reg}"
        );
    }
}
