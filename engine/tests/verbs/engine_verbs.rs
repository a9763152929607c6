//! The engine over the `verbs` provider beyond the generic e2e tests (`engine_verbs_*`):
//! how a requester's registration mode follows the device (persistent where there is
//! no fast registration, as on siw0), and, on iWARP devices (siw0), a verbs responder
//! serving every message shape to a requester over our own userspace `siw` provider.
//!
//! Needs the qemu lab (`test = false`): tools/lab/verbs.sh runs it with `RPCRDMA_VERBS_DEV`
//! and `RPCRDMA_VERBS_IP` set. Tests named `iwarp_*` need an iWARP device; the lab skips
//! them on rxe0 (`--skip iwarp_`).

use crate::engine_support;

use std::net::SocketAddr;
use std::time::Instant;

use engine_support::*;
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::verbs::{list_devices, Transport, VerbsProvider};
use rpcrdma::fabric::Device;
use rpcrdma::{CallRequest, CallStatus, Outcome};
use rpcrdma::{ConfigError, ConnConfig, ConnState, RegMode, Registration};
use rpcrdma::{ConnError, Requester, Responder};

fn device_info(net: &VerbsNet) -> rpcrdma::fabric::verbs::DeviceInfo {
    list_devices()
        .expect("list devices")
        .into_iter()
        .find(|d| d.name == net.dev)
        .unwrap_or_else(|| panic!("{} is not listed", net.dev))
}

/// Fast registration over verbs is type-2 memory windows. `Registration::Auto` picks it
/// where the device has them (rxe) and persistent registration where it has not (siw:
/// `max_mw` 0); an explicit `FastReg` on such a device is refused at creation with a
/// typed error that says why, not later mid-RPC.
#[test]
fn requester_registration_follows_the_device() {
    let net = VerbsNet::from_env();
    let info = device_info(&net);
    let dev = net.device();
    assert_eq!(dev.caps().fast_reg, info.mw_type2);
    let auto = Requester::<VerbsProvider>::connect_with(&dev, &net.addr(), &test_config())
        .unwrap_or_else(|e| panic!("requester on {}: {e}", net.dev));
    let want = if info.mw_type2 {
        RegMode::FastReg
    } else {
        RegMode::Persistent
    };
    assert_eq!(auto.registration(), want, "{}", net.dev);
    let forced = ConnConfig {
        registration: Registration::FastReg,
        ..test_config()
    };
    match Requester::<VerbsProvider>::connect_with(&dev, &net.addr(), &forced) {
        Ok(r) => {
            assert!(info.mw_type2, "{}: FastReg without windows", net.dev);
            assert_eq!(r.registration(), RegMode::FastReg);
        }
        // Refused up front, with a reason the caller can match, before anything is
        // created on the device.
        Err(ConnError::Config(ConfigError::FastRegUnsupported)) => {
            assert!(!info.mw_type2, "{} has windows but was refused", net.dev);
        }
        Err(e) => panic!("unexpected requester error on {}: {e}", net.dev),
    }
}

/// A verbs responder on the kernel's siw device and a requester over our userspace siw
/// provider, polled from one thread.
struct Mixed {
    server: Responder<VerbsProvider, TestService, Box<dyn FnMut() -> Option<TestService>>>,
    requester: Requester<SiwProvider>,
    next_tag: u64,
}

impl Mixed {
    fn connect(net: &VerbsNet, registration: Registration) -> Mixed {
        assert_eq!(
            device_info(net).transport,
            Transport::Iwarp,
            "iwarp_* tests need an iWARP device"
        );
        let addr = net.addr();
        let mut once = Some(TestService::default());
        let factory: Box<dyn FnMut() -> Option<TestService>> = Box::new(move || once.take());
        let mut server = Responder::bind(net.device(), &addr, test_config(), factory)
            .expect("verbs responder listens");
        server.keep_closed(true);
        let sdev = SiwDevice::new().expect("userspace siw device");
        let to: SocketAddr = addr.0;
        // Version 1 shapes between the providers: between two rpcrdma peers a long call
        // would otherwise go as a continuation group (the round-trip draft), which the
        // continuation case of the lab's verbs-interop step covers.
        let cfg = ConnConfig {
            registration,
            extensions: false,
            ..test_config()
        };
        let requester = Requester::<SiwProvider>::connect_with(&sdev, &to, &cfg)
            .expect("siw requester starts connecting");
        let mut m = Mixed {
            server,
            requester,
            next_tag: 1,
        };
        let end = Instant::now() + DEADLINE;
        loop {
            let now = Instant::now();
            m.poll(now);
            let up = m
                .server
                .connections()
                .first()
                .is_some_and(|c| c.state() == ConnState::Established);
            match m.requester.state() {
                ConnState::Established if up => return m,
                s @ (ConnState::Draining | ConnState::Closed) => {
                    panic!("siw requester to verbs responder: connection {s:?}")
                }
                _ => {}
            }
            assert!(
                now < end,
                "siw requester to verbs responder: connect timed out"
            );
        }
    }

    fn poll(&mut self, now: Instant) {
        self.server.poll(now);
        self.requester.poll(now);
    }

    fn call(&mut self, req: CallRequest) -> Outcome {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.requester.submit(req, tag).expect("submit");
        let end = Instant::now() + DEADLINE;
        loop {
            let now = Instant::now();
            self.poll(now);
            if let Some(o) = self.requester.poll_outcome() {
                assert_eq!(o.tag, tag, "one call at a time");
                return o;
            }
            assert!(now < end, "no reply before the deadline");
        }
    }

    fn msg(&self, proc: u32, args: &[u8]) -> rpcrdma::RegBuf {
        let mut b = if CALL_HDR + args.len() <= 4096 {
            self.requester.alloc_msg().expect("send buffer")
        } else {
            self.requester.alloc_large().expect("large buffer")
        };
        write_call(&mut b, proc, args);
        b
    }

    fn large(&self, data: &[u8]) -> rpcrdma::RegBuf {
        let mut b = self.requester.alloc_large().expect("large buffer");
        b.fill(data).expect("fits");
        b
    }

    fn seen(&self) -> &Seen {
        &self
            .server
            .connections()
            .first()
            .expect("responder")
            .service()
            .seen
    }
}

/// NULL, inline ECHO, a long call answered through a Reply chunk, Read chunks at odd
/// positions, and a Write chunk: the kernel siw device's responder path through the
/// engine, against our userspace siw requester (per-RPC fast registration).
#[test]
fn iwarp_siw_requester_to_verbs_responder_every_shape() {
    every_shape(Registration::FastReg);
}

/// The same with the userspace requester's chunk pools registered persistently: the
/// kernel responder reads and writes them under their one key, and, as the requester
/// offers no remote invalidation, answers with plain Sends.
#[test]
fn iwarp_persistent_siw_requester_to_verbs_responder_every_shape() {
    every_shape(Registration::Persistent);
}

fn every_shape(registration: Registration) {
    let net = VerbsNet::from_env();
    let mut m = Mixed::connect(&net, registration);
    let persistent = registration == Registration::Persistent;
    assert_eq!(m.requester.thresholds().remote_invalidate, !persistent);

    let o = m.call(CallRequest::new(m.msg(PROC_NULL, &[]), 512));
    assert_eq!(o.status, CallStatus::Success, "NULL");

    let data = pattern(333, 1);
    let o = m.call(CallRequest::new(m.msg(PROC_ECHO, &opaque(&data)), 512));
    assert_eq!(o.status, CallStatus::Success, "inline ECHO");
    assert_eq!(results(&o), &opaque(&data)[..]);

    let data = pattern(10_001, 3);
    let o = m.call(CallRequest::new(m.msg(PROC_ECHO, &opaque(&data)), 12_000));
    assert_eq!(o.status, CallStatus::Success, "long call, Reply chunk");
    assert_eq!(results(&o), &opaque(&data)[..]);
    assert_eq!(m.seen().long_calls, 1);
    assert_eq!(m.seen().reply_chunk, Some(12_000));

    let datas = [pattern(1, 0), pattern(3, 1), pattern(4095, 2)];
    let mut args = Vec::new();
    for d in &datas {
        args.extend_from_slice(&(d.len() as u32).to_be_bytes());
    }
    let mut req = CallRequest::new(m.msg(PROC_SUM_ITEMS, &args), 512);
    let mut position = CALL_HDR as u32;
    for d in &datas {
        position += 4;
        req.push_ddp_arg(position, m.large(d)).expect("room");
        position += d.len().next_multiple_of(4) as u32;
    }
    let o = m.call(req);
    assert_eq!(o.status, CallStatus::Success, "Read chunks");
    let res = results(&o);
    assert_eq!(word(res, 0), 3);
    for (i, d) in datas.iter().enumerate() {
        assert_eq!(word(res, 4 + 8 * i) as usize, d.len(), "item {i} length");
        let sum = d
            .iter()
            .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        assert_eq!(word(res, 8 + 8 * i), sum, "item {i} arrived intact");
    }

    let data = pattern(40_000, 5);
    let mut req = CallRequest::new(m.msg(PROC_ECHO_DDP, &40_000u32.to_be_bytes()), 512);
    req.push_ddp_arg((CALL_HDR + 4) as u32, m.large(&data))
        .expect("room");
    req.push_write_sink(m.requester.alloc_large().expect("sink"))
        .expect("room");
    let o = m.call(req);
    assert_eq!(
        o.status,
        CallStatus::Success,
        "Read chunk in, Write chunk out"
    );
    assert_eq!(results(&o), &40_000u32.to_be_bytes()[..]);
    assert_eq!(o.write_result(0), Some(&data[..]));

    let r = m.server.connections().first().expect("responder").stats();
    assert_eq!(r.ddp_results, 1);
    assert_eq!(r.chunk_replies, 1);
    assert_eq!(m.seen().calls, 5);
    let st = m.requester.stats();
    if persistent {
        assert_eq!(r.remote_invalidations, 0, "plain Sends only");
        assert_eq!((st.local_invalidations, st.remote_invalidations), (0, 0));
    } else {
        assert!(st.local_invalidations + st.remote_invalidations > 0);
    }
}
