//! Embedding rpcrdma: a responder serving the built-in echo program through the ONC RPC
//! dispatcher, and a requester calling it over the shared-memory provider. The README
//! shows this file; CI runs it (`cargo run --example embed -p rpcrdma-ulp`).
//!
//! `Pair` drives both ends from this one thread, which keeps the example short. An
//! appliance instead runs `rpcrdma::{ResponderTask, RequesterTask}` on pinned
//! pollers and calls through `Client` from application threads
//! (see engine/tests/engine/engine_poller.rs).

use std::error::Error;
use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::CallStatus;
use rpcrdma::Pair;
use rpcrdma::{ConnConfig, ConnEvent};
use rpcrdma_ulp::binding::with_keepalive;
use rpcrdma_ulp::builtin::{
    echo_proc, EchoData, EchoProgram, NullProgram, ECHO_PROGRAM, ECHO_VERSION,
};
use rpcrdma_ulp::client::{inline_call, OutcomeResults};
use rpcrdma_ulp::ddp::XdrCodec;
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

fn main() -> Result<(), Box<dyn Error>> {
    // The responder's upper layer: ONC RPC dispatch by program/version/procedure.
    let mut programs = Dispatcher::new();
    programs.register(Box::new(EchoProgram::default()))?;
    programs.register(Box::new(NullProgram::default()))?;

    // Both ends over shm; the CM address is an abstract Unix socket name.
    let addr = ShmAddr::abstract_name(format!("rpcrdma-embed-{}", std::process::id()));
    let cfg = ConnConfig::default();
    // Like the Linux client, the requester's keepalive probe is a NULL call to the
    // program it uses, which the dispatcher answers with SUCCESS.
    let client_cfg = with_keepalive(
        cfg.clone(),
        ECHO_PROGRAM,
        ECHO_VERSION,
        Duration::from_secs(30),
    );
    let mut pair: Pair<ShmProvider, Dispatcher> = Pair::connect(
        &ShmDevice::new(),
        ShmDevice::new(),
        &addr,
        &client_cfg,
        &cfg,
        programs,
        Duration::from_secs(10),
    )?;

    // The requester encodes RPC header and arguments straight into a registered send
    // buffer; the engine picks the message shape (inline here) and assigns the XID.
    let payload = b"hello over RPC-over-RDMA";
    let header = CallHeader {
        xid: 0,
        prog: ECHO_PROGRAM,
        vers: 1,
        procedure: echo_proc::ECHO,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let max_reply = EchoProgram::info(echo_proc::ECHO)
        .ok_or("ECHO is declared")?
        .max_reply_len(payload.len() as u32, false, 0) as u32;
    let msg = pair.requester.alloc_msg()?;
    let request = inline_call(msg, &header, &EchoData { data: payload }, max_reply)?;

    let outcome = pair.call(request, Duration::from_secs(10))?;
    if outcome.status != CallStatus::Success {
        return Err(format!("call failed: {:?}", outcome.status).into());
    }
    // The results are read in place from the receive buffer.
    let results = OutcomeResults::new(&outcome);
    let (xid, mut cursor) = results.cursor()?;
    let echoed = EchoData::decode(&mut cursor)?;
    cursor.finish()?;
    if echoed.data != payload {
        return Err("echo mismatch".into());
    }
    println!(
        "xid {xid:#010x}: echoed {} bytes: {:?}",
        echoed.data.len(),
        String::from_utf8_lossy(echoed.data)
    );

    // An explicit health check: the same probe the keepalive timer sends.
    pair.requester.health_check()?;
    let mut answered = false;
    pair.run_until(Duration::from_secs(10), |p| {
        while let Some(ev) = p.requester.poll_event() {
            answered |= matches!(ev, ConnEvent::ProbeAnswered(_));
        }
        answered
    });
    let served = pair
        .responder()
        .ok_or("responder connection")?
        .service()
        .stats();
    if !answered || served.nulls != 1 {
        return Err("keepalive probe not answered by ECHO's NULL".into());
    }
    println!(
        "probe answered (NULL calls served: {}, PROG_UNAVAIL: {})",
        served.nulls, served.prog_unavail
    );
    Ok(())
}
