//! The drivers as poller tasks over shm: a server task on one poller, a requester task
//! on the other, and application threads calling through `Client` (mailbox in, tickets
//! out). Every wait has a deadline; pollers park when idle so the test shares cores.

use crate::engine_support;

use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::shm::{ShmDevice, ShmProvider};
use rpcrdma::ConnState;
use rpcrdma::{CallRequest, CallStatus};
use rpcrdma::{Client, ConnMsg, RequesterTask, ResponderTask};
use rpcrdma::{Requester, Responder};
use rpcrdma_poller::{IdlePolicy, PollerConfig, PollerGroup};

#[test]
fn application_threads_call_through_the_mailbox() {
    let cfg = test_config();
    let net = ShmNet;
    let addr = net.addr();
    let config = PollerConfig {
        idle: IdlePolicy::parking(Duration::from_millis(1)),
        ..PollerConfig::default()
    };
    let group = PollerGroup::<ConnMsg>::start(&[0, 1], config).expect("pollers");
    let server = Responder::<ShmProvider, _, _>::bind(ShmDevice::new(), &addr, cfg.clone(), || {
        Some(TestService::default())
    })
    .expect("server");
    let server_task = ResponderTask::new(server).allow_park(true);
    group
        .handle(0)
        .expect("poller 0")
        .add_task(Box::new(server_task))
        .map_err(|_| "add server task")
        .expect("added");

    // Connect from this thread while the server task answers, then hand over.
    let dev = ShmDevice::new();
    let mut conn = Requester::<ShmProvider>::connect_with(&dev, &addr, &cfg).expect("connect");
    let end = Instant::now() + DEADLINE;
    while conn.state() != ConnState::Established {
        conn.poll(Instant::now());
        assert!(Instant::now() < end, "connected");
        std::thread::yield_now();
    }
    let (task, table) = RequesterTask::new(conn, 32);
    let handle = group.handle(1).expect("poller 1").clone();
    let id = handle
        .add_task(Box::new(task.park_while_busy(true)))
        .map_err(|_| "add requester task")
        .expect("added");
    let client = Client::new(handle, id, table);

    let threads: Vec<_> = (0..2u8)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..40usize {
                    let data = pattern(10 + i * 37, t);
                    let mut m = client.alloc_msg().expect("msg");
                    write_call(&mut m, PROC_ECHO, &opaque(&data));
                    let pending = client.call(CallRequest::new(m, 4000)).expect("submitted");
                    let o = pending
                        .wait_until(Instant::now() + DEADLINE)
                        .expect("outcome before the deadline");
                    assert_eq!(o.status, CallStatus::Success);
                    assert_eq!(results(&o), &opaque(&data)[..]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("caller thread");
    }
    assert_eq!(client.table().available(), 32, "every ticket is back");
    assert_eq!(client.credits().snapshot().in_flight, 0);

    // Calls abandoned by their caller still complete and recycle their tickets.
    for _ in 0..4 {
        let mut m = client.alloc_msg().expect("msg");
        write_call(&mut m, PROC_NULL, &[]);
        drop(client.call(CallRequest::new(m, 256)).expect("submitted"));
    }
    let end = Instant::now() + DEADLINE;
    while client.table().available() != 32 {
        assert!(Instant::now() < end, "abandoned tickets recycled");
        std::thread::sleep(Duration::from_millis(1));
    }

    client.close().expect("close sent");
    group
        .shutdown(Instant::now() + DEADLINE)
        .expect("pollers stop in time");
}
