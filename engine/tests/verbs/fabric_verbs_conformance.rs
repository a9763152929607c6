//! The generic fabric conformance suite (tests/conformance/), unchanged, run against the
//! `verbs` provider on a real kernel RDMA device, plus a few verbs-specific checks
//! (`verbs_specific`).
//!
//! It needs a device, so it is not part of plain `cargo test` (`test = false` in the
//! manifest): tools/lab/verbs.sh builds it on the host and runs it inside the qemu lab,
//! once per device, with `RPCRDMA_VERBS_DEV` (device name, e.g. `rxe0`) and
//! `RPCRDMA_VERBS_IP` (an IPv4 or IPv6 address owned by that device) set.

use crate::conformance;

use std::net::{IpAddr, SocketAddr};

use conformance::Fixture;
use rpcrdma::fabric::verbs::{VerbsAddr, VerbsDevice, VerbsProvider};

/// Device name variable.
const DEV_VAR: &str = "RPCRDMA_VERBS_DEV";
/// Address variable.
const IP_VAR: &str = "RPCRDMA_VERBS_IP";

/// verbs: every "host" opens the same device; addresses differ by port.
pub struct VerbsFixture;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this suite runs inside the qemu lab (tools/lab/verbs.sh), \
             which sets {DEV_VAR} and {IP_VAR}"
        )
    })
}

impl Fixture for VerbsFixture {
    type P = VerbsProvider;

    fn open_device() -> VerbsDevice {
        let name = env(DEV_VAR);
        VerbsDevice::open(&name).unwrap_or_else(|e| panic!("open {name}: {e}"))
    }

    fn unique_addr() -> VerbsAddr {
        let ip: IpAddr = env(IP_VAR)
            .parse()
            .unwrap_or_else(|e| panic!("{IP_VAR} is not an IP address: {e}"));
        // Ports are process-wide in rdma_cm: spread processes apart (a lab run may start
        // several in one boot) and give every call its own port.
        let base = 20_000 + (std::process::id() % 400) * 100;
        let port = base + (conformance::unique_number() % 100) as u32;
        VerbsAddr(SocketAddr::new(ip, port as u16))
    }
}

conformance_tests!(VerbsFixture);

/// Behaviour specific to the verbs provider on the lab's devices, beyond the generic
/// rules: what it reports about the device, the fast-registration fallback, inline
/// sends, Read splitting and completion order.
mod verbs_specific {
    use super::*;
    use conformance::{connect, pair, pattern, Opts};
    use rpcrdma::fabric::mr::{key_generation, key_index};
    use rpcrdma::fabric::verbs::{list_devices, Transport};
    use rpcrdma::fabric::{
        Device, FabricError, MemoryRegion, ProtectionDomain, QpCaps, QpConfig, QueuePair, RecvWr,
        SendWr, WcOpcode, WcStatus,
    };

    fn is_siw() -> bool {
        env(DEV_VAR).starts_with("siw")
    }

    #[test]
    fn the_device_is_listed_with_its_transport_and_limits() {
        let name = env(DEV_VAR);
        let all = list_devices().expect("list devices");
        let info = all
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} not in {all:?}"));
        assert!(info.port_active, "{name}: port not active");
        if is_siw() {
            assert_eq!(info.transport, Transport::Iwarp);
            assert!(!info.mw_type2, "siw has no memory windows");
            assert_eq!(info.max_sge_rd, 1, "iWARP Read sinks take one entry");
        } else {
            assert_eq!(info.transport, Transport::InfiniBand);
            assert!(info.mw_type2, "rxe binds type-2 memory windows");
        }
        let dev = VerbsFixture::open_device();
        assert_eq!(dev.info(), info);
        assert!(dev.caps().max_qp_wr > 0 && dev.caps().max_msg_size > 0);
        match VerbsDevice::open("rpcrdma-no-such-device") {
            Err(e) => assert!(
                e.to_string().contains(&name),
                "the error names the devices present: {e}"
            ),
            Ok(d) => panic!("opened {d:?}"),
        }
    }

    /// rxe: windows rotate the low key byte under the caller's control. siw: no windows,
    /// and the refusal says so.
    #[test]
    fn fast_registration_slots_rotate_keys_or_are_refused_clearly() {
        let dev = VerbsFixture::open_device();
        let pd = dev.alloc_pd().expect("pd");
        match pd.alloc_fast_mr(1 << 16) {
            Ok(mut mr) => {
                assert!(!is_siw(), "siw granted a memory window");
                let k0 = mr.rkey();
                let k1 = mr.rekey();
                let k2 = mr.rekey();
                assert_eq!(key_index(k1), key_index(k0));
                assert_eq!(key_index(k2), key_index(k0));
                assert_eq!(key_generation(k1), key_generation(k0).wrapping_add(1));
                assert_eq!(key_generation(k2), key_generation(k0).wrapping_add(2));
                assert_eq!(mr.rkey(), k2);
            }
            Err(FabricError::Exhausted { what, max }) => {
                assert!(is_siw(), "rxe refused a memory window: {what}");
                assert_eq!(max, 0);
                assert!(what.contains("memory windows"), "{what}");
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    /// Small Sends go inline (the queue pair got inline room) and arrive intact.
    #[test]
    fn small_sends_go_inline_and_arrive() {
        let mut p = pair::<VerbsFixture>();
        assert!(p.c.qp.max_inline_data() >= 32, "no inline room");
        let data = pattern(7, 48);
        p.c.fill(0, &data);
        let rb = [p.s.sge(4096, 64)];
        p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
        let sb = [p.c.sge(0, 48)];
        p.c.qp.post_send(&[SendWr::send(2, &sb)]).unwrap();
        let (s, c) = p.completions(1, 1);
        assert_eq!((s[0].status, s[0].byte_len), (WcStatus::Success, 48));
        assert_eq!(c[0].status, WcStatus::Success);
        assert_eq!(p.s.read(4096, 48), data);
    }

    /// A Read into five entries, two of them empty (siw takes one entry per Read, so
    /// the provider splits it), brings back exactly the remote bytes.
    #[test]
    fn reads_into_many_entries_arrive_whole() {
        let cfg = QpConfig {
            caps: QpCaps {
                max_send_sge: 5,
                ..QpCaps::default()
            },
            ..QpConfig::default()
        };
        let mut p = connect::<VerbsFixture>(&Opts {
            client: cfg,
            ..Opts::default()
        });
        let data = pattern(8, 3000);
        p.s.fill(10_000, &data);
        p.c.fill(0, &[0xee; 3100]);
        let sg = [
            p.c.sge(0, 0),
            p.c.sge(0, 1000),
            p.c.sge(1000, 0),
            p.c.sge(1000, 1999),
            p.c.sge(2999, 1),
        ];
        let remote = p.s.remote(10_000);
        p.c.qp.post_send(&[SendWr::read(5, &sg, remote)]).unwrap();
        let (_, c) = p.completions(0, 1);
        assert_eq!(
            (c[0].wr_id, c[0].opcode, c[0].status, c[0].byte_len),
            (5, WcOpcode::RdmaRead, WcStatus::Success, 3000)
        );
        assert_eq!(p.c.read(0, 3000), data);
        assert_eq!(p.c.read(3000, 100), vec![0xee; 100]);
    }

    /// Reads followed by Sends complete in posting order, round after round, even where
    /// the device reports the Send first (siw).
    #[test]
    fn completions_keep_posting_order() {
        let mut p = pair::<VerbsFixture>();
        let rb = [p.s.sge(0, 64)];
        for round in 0..20u64 {
            p.s.qp
                .post_recv(&[RecvWr {
                    wr_id: round,
                    sgl: &rb,
                }])
                .unwrap();
            let rd = [p.c.sge(8192, 4096)];
            let sd = [p.c.sge(0, 8)];
            let remote = p.s.remote(65536);
            let chain = [
                SendWr::read(round * 2, &rd, remote),
                SendWr::send(round * 2 + 1, &sd),
            ];
            p.c.qp.post_send(&chain).unwrap();
            let (_, c) = p.completions(1, 2);
            let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
            assert_eq!(
                got,
                vec![
                    (round * 2, WcOpcode::RdmaRead, WcStatus::Success),
                    (round * 2 + 1, WcOpcode::Send, WcStatus::Success)
                ],
                "round {round}"
            );
        }
    }
}
