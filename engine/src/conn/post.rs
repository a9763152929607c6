//! Posting what a core staged: the only place a core's work requests meet a queue pair.
//!
//! Each poll the driver takes the core's [`Transmit`] and posts the receive chain, then
//! the send chain, at most [`POST_CHUNK`] requests per doorbell, and reports back:
//! [`on_posted`](crate::core::RequesterCore::on_posted) when everything went out,
//! [`on_post_failed`](crate::core::RequesterCore::on_post_failed) with how far each
//! chain got when the provider refused one. A refused receive chain does not stop the
//! send chain: what is staged holds send-queue room and must either go out or be
//! accounted as flushed.

use core::mem::MaybeUninit;
use std::time::Instant;

use crate::core::{PostFailure, Transmit, Transmitter};
use crate::fabric::{PostError, Provider, QueuePair, RecvWr, SendWr};

/// Requests handed to one `post_send` or `post_recv` call at most. Longer chains (rare:
/// one poll staging more than this) take more than one doorbell.
pub(super) const POST_CHUNK: usize = 64;

/// Chains up to this long are built in a short stack array: most polls stage one or
/// two requests, so this spares initialising a full [`POST_CHUNK`] one each time (and a
/// chain of one is posted from where it lies, with no array).
const SHORT_CHAIN: usize = 4;

/// One poll's posting: the core's transmit onto `qp`, and the report back. Drivers
/// call this once per poll, after feeding completions and timers.
#[inline]
pub(super) fn transmit<C: Transmitter, Q: QueuePair>(core: &mut C, qp: &mut Q, now: Instant) {
    transmit_in::<false, C, Q>(core, qp, now);
}

/// [`transmit`], the send chain first when `SENDS_FIRST`.
#[inline(always)]
fn transmit_in<const SENDS_FIRST: bool, C: Transmitter, Q: QueuePair>(
    core: &mut C,
    qp: &mut Q,
    now: Instant,
) {
    let Some(t) = core.poll_transmit(now) else {
        return;
    };
    match post_transmit_in::<SENDS_FIRST, _, _, _>(
        &t,
        qp,
        |q, r| q.post_recv(r),
        |q, s| q.post_send(s),
    ) {
        Ok(()) => core.on_posted(),
        Err(f) => core.on_post_failed(f, now),
    }
}

/// One poll's posting for a connection on provider `P`: [`transmit_sends_first`] where
/// `P`'s receives are placed only by this thread's own polls
/// ([`Provider::RECVS_PLACED_BY_OWN_POLL`](crate::fabric::Provider::RECVS_PLACED_BY_OWN_POLL),
/// shm), else [`transmit`] (verbs, iWARP: a Send that finds no receive is an RNR,
/// fatal on iWARP, so the receives go first). Every posting of a requester or a
/// responder connection goes through here, so the core's `poll_transmit` keeps one
/// caller. On shm a requester's reply (a responder's next call) is placed only by this
/// connection's own next CQ poll, on this thread and after this post, so a receive
/// restocked behind a Send is there before a message can land in it; one call at a
/// time, the next call's doorbell then no longer waits for that receive's post.
#[inline(always)]
pub(super) fn transmit_staged<P: Provider, C: Transmitter, Q: QueuePair>(
    core: &mut C,
    qp: &mut Q,
    now: Instant,
) {
    if P::RECVS_PLACED_BY_OWN_POLL {
        transmit_sends_first(core, qp, now);
    } else {
        transmit(core, qp, now);
    }
}

/// [`transmit`] with the send chain posted before the receive chain: a requester's or
/// a responder's poll on a provider whose receives are placed only by its own polls
/// ([`Provider::RECVS_PLACED_BY_OWN_POLL`](crate::fabric::Provider::RECVS_PLACED_BY_OWN_POLL)),
/// where a receive staged with a Send can follow it (the next poll, on this thread, is
/// the first that can place a message in it: a call in the receive that restocks a
/// reply's grant, a reply in the receive a call's reply buffer left). The Sends'
/// doorbell then comes before the receives' post on a round trip's critical path.
// Out of line, as `transmit` is in practice (called from the accept and the poll): the
// core's `poll_transmit` then has this one caller and is inlined into it (inlined into
// the driver's poll instead, it was not: about 19 instructions more a round trip).
#[inline(never)]
pub(super) fn transmit_sends_first<C: Transmitter, Q: QueuePair>(
    core: &mut C,
    qp: &mut Q,
    now: Instant,
) {
    transmit_in::<true, C, Q>(core, qp, now);
}

/// Posts `t` through `post_recv` and `post_send` (a queue pair's, or a test wire's),
/// receives first; on a refusal, how far each chain got.
#[cfg(any(test, feature = "testing"))]
#[inline]
pub(crate) fn post_transmit<Q, R, S>(
    t: &Transmit<'_>,
    q: &mut Q,
    post_recv: R,
    post_send: S,
) -> Result<(), PostFailure>
where
    R: FnMut(&mut Q, &[RecvWr<'_>]) -> Result<(), PostError>,
    S: FnMut(&mut Q, &[SendWr<'_>]) -> Result<(), PostError>,
{
    post_transmit_in::<false, _, _, _>(t, q, post_recv, post_send)
}

/// Runs `recvs` and `sends` on `q`, receives first or, when `SENDS_FIRST`, sends first;
/// their results in (receives, sends) order either way.
#[inline(always)]
fn in_order<const SENDS_FIRST: bool, Q, T, U>(
    q: &mut Q,
    recvs: impl FnOnce(&mut Q) -> T,
    sends: impl FnOnce(&mut Q) -> U,
) -> (T, U) {
    if SENDS_FIRST {
        let s = sends(q);
        (recvs(q), s)
    } else {
        let r = recvs(q);
        (r, sends(q))
    }
}

/// [`post_transmit`], the send chain first when `SENDS_FIRST`. Either way a refused
/// chain does not stop the other.
#[inline(always)]
fn post_transmit_in<const SENDS_FIRST: bool, Q, R, S>(
    t: &Transmit<'_>,
    q: &mut Q,
    mut post_recv: R,
    mut post_send: S,
) -> Result<(), PostFailure>
where
    R: FnMut(&mut Q, &[RecvWr<'_>]) -> Result<(), PostError>,
    S: FnMut(&mut Q, &[SendWr<'_>]) -> Result<(), PostError>,
{
    let (recvs, sends) = if t.recv_count() <= 1 && t.send_count() <= 1 {
        // The usual poll (a call's Send and the receive its reply's buffer left, a
        // reply's Send, one of them alone): each request posted as a chain of one,
        // without the chunk loop's bookkeeping.
        in_order::<SENDS_FIRST, _, _, _>(
            q,
            |q| post_at_most_one(q, &Recvs(t), &mut post_recv),
            |q| post_at_most_one(q, &Sends(t), &mut post_send),
        )
    } else {
        in_order::<SENDS_FIRST, _, _, _>(
            q,
            |q| post_chunks(q, &Recvs(t), &mut post_recv),
            |q| post_chunks(q, &Sends(t), &mut post_send),
        )
    };
    match (recvs, sends) {
        (Ok(()), Ok(())) => Ok(()),
        (r, s) => {
            let (recvs_posted, e1) =
                r.map_or_else(|(n, e)| (n, Some(e)), |()| (t.recv_count(), None));
            let (sends_posted, e2) =
                s.map_or_else(|(n, e)| (n, Some(e)), |()| (t.send_count(), None));
            let error = e1.or(e2).unwrap_or(PostError {
                posted: 0,
                kind: crate::fabric::PostErrorKind::Malformed("post refused"),
            });
            Err(PostFailure {
                recvs_posted,
                sends_posted,
                error,
            })
        }
    }
}

/// One of a [`Transmit`]'s two chains, written into chain arrays as the provider
/// takes them (`Transmit::fill_recvs`, `fill_sends`).
trait Chain<W> {
    /// Requests staged in this chain.
    fn count(&self) -> usize;
    /// Writes the requests from the `from`-th on into `chain`, as many as fit, and
    /// returns them.
    fn fill<'c>(&self, from: usize, chain: &'c mut [MaybeUninit<W>]) -> &'c [W];
}

/// The receive chain of a [`Transmit`].
struct Recvs<'t, 'a>(&'t Transmit<'a>);

impl<'a> Chain<RecvWr<'a>> for Recvs<'_, 'a> {
    #[inline(always)]
    fn count(&self) -> usize {
        self.0.recv_count()
    }
    #[inline(always)]
    fn fill<'c>(&self, from: usize, chain: &'c mut [MaybeUninit<RecvWr<'a>>]) -> &'c [RecvWr<'a>] {
        self.0.fill_recvs(from, chain)
    }
}

/// The send chain of a [`Transmit`].
struct Sends<'t, 'a>(&'t Transmit<'a>);

impl<'a> Chain<SendWr<'a>> for Sends<'_, 'a> {
    #[inline(always)]
    fn count(&self) -> usize {
        self.0.send_count()
    }
    #[inline(always)]
    fn fill<'c>(&self, from: usize, chain: &'c mut [MaybeUninit<SendWr<'a>>]) -> &'c [SendWr<'a>] {
        self.0.fill_sends(from, chain)
    }
}

/// Posts the one request of `chain` (which holds at most one) as a chain of one, or
/// nothing when it is empty; on a refusal, how many went out before it (none), as
/// [`post_chunks`] reports it.
#[inline(always)]
fn post_at_most_one<Q, W, C, P>(
    q: &mut Q,
    chain: &C,
    post: &mut P,
) -> Result<(), (usize, PostError)>
where
    C: Chain<W>,
    P: FnMut(&mut Q, &[W]) -> Result<(), PostError>,
{
    if chain.count() == 0 {
        return Ok(());
    }
    post_one_chunk::<1, _, _, _, _>(q, chain, 0, post).map_err(|e| (e.posted.min(1), e))
}

/// Posts every request of `chain` in chains of at most [`POST_CHUNK`]; on a refusal,
/// how many went out before it.
#[inline(always)]
fn post_chunks<Q, W, C, P>(q: &mut Q, chain: &C, post: &mut P) -> Result<(), (usize, PostError)>
where
    C: Chain<W>,
    P: FnMut(&mut Q, &[W]) -> Result<(), PostError>,
{
    let total = chain.count();
    let mut done = 0;
    while done < total {
        let n = (total - done).min(POST_CHUNK);
        // One request (the usual poll: a Send, a receive) needs only a one-place array.
        let r = if n == 1 {
            post_one_chunk::<1, _, _, _, _>(q, chain, done, post)
        } else if n <= SHORT_CHAIN {
            post_one_chunk::<SHORT_CHAIN, _, _, _, _>(q, chain, done, post)
        } else {
            post_one_chunk::<POST_CHUNK, _, _, _, _>(q, chain, done, post)
        };
        if let Err(e) = r {
            return Err((done + e.posted.min(n), e));
        }
        done += n;
    }
    Ok(())
}

/// Posts the requests of `chain` from the `from`-th on, at most `N` of them, as one
/// chain. The chain array is left uninitialised beyond the requests written into it:
/// at depth a poll posts chains of 32 and more, and filling all `N` places with a
/// blank request first cost more than writing the chain (about 120 instructions per
/// call at depth 32, `perf/insns.sh`'s rate region).
#[inline(always)]
fn post_one_chunk<const N: usize, Q, W, C, P>(
    q: &mut Q,
    chain: &C,
    from: usize,
    post: &mut P,
) -> Result<(), PostError>
where
    C: Chain<W>,
    P: FnMut(&mut Q, &[W]) -> Result<(), PostError>,
{
    let mut places = [const { MaybeUninit::<W>::uninit() }; N];
    post(q, chain.fill(from, &mut places))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::outbox::Outbox;
    use crate::fabric::{PostErrorKind, QpState, SendFlags, SendOp, Sge};

    fn staged(sends: u64, recvs: u64) -> Outbox {
        let mut o = Outbox::with_capacity(256, 256, 256);
        for id in 0..sends {
            let sge = Sge::new(0x1000 + id, 8, 1);
            o.push_send(id, SendOp::Send, &[sge], SendFlags::SIGNALED)
                .unwrap();
        }
        for id in 0..recvs {
            o.push_recv(1000 + id, Sge::new(0x9000, 64, 2)).unwrap();
        }
        o
    }

    /// What [`post_logged`] saw posted: each chain's length, and the requests' ids.
    #[derive(Default)]
    struct Posted {
        recv_chains: Vec<usize>,
        send_chains: Vec<usize>,
        recvs: Vec<u64>,
        sends: Vec<u64>,
    }

    /// Posts `t` with providers that accept everything and log it, checking that each
    /// request carries the one buffer `staged` gave it.
    fn post_logged(t: &Transmit<'_>) -> Posted {
        let mut log = Posted::default();
        post_transmit(
            t,
            &mut log,
            |l, r| {
                l.recv_chains.push(r.len());
                l.recvs.extend(r.iter().map(|w| w.wr_id));
                assert!(r
                    .iter()
                    .all(|w| w.sgl.len() == 1 && w.sgl[0].addr == 0x9000));
                Ok(())
            },
            |l, s| {
                l.send_chains.push(s.len());
                l.sends.extend(s.iter().map(|w| w.wr_id));
                assert!(s
                    .iter()
                    .all(|w| w.sgl.len() == 1 && w.sgl[0].addr == 0x1000 + w.wr_id));
                Ok(())
            },
        )
        .expect("all posted");
        log
    }

    #[test]
    fn long_chains_take_one_doorbell_per_chunk_in_order() {
        let o = staged(150, 3);
        let log = post_logged(&Transmit::of(&o).expect("staged"));
        assert_eq!(log.send_chains, vec![64, 64, 22]);
        assert_eq!(log.sends, (0..150).collect::<Vec<_>>());
        assert_eq!(log.recvs, vec![1000, 1001, 1002]);
    }

    #[test]
    fn a_short_transmit_posts_one_receive_and_one_send_as_chains_of_one() {
        // The fast path (at most one of each) and the general one (two sends) post the
        // same requests in the same order.
        for (sends, recvs) in [(1, 1), (1, 0), (0, 1), (2, 1)] {
            let o = staged(sends, recvs);
            let log = post_logged(&Transmit::of(&o).expect("staged"));
            let doorbells = usize::from(recvs > 0) + usize::from(sends > 0);
            assert_eq!(
                log.recv_chains.len() + log.send_chains.len(),
                doorbells,
                "{sends} sends, {recvs} receives"
            );
            assert_eq!(log.sends, (0..sends).collect::<Vec<_>>());
            assert_eq!(log.recvs, (1000..1000 + recvs).collect::<Vec<_>>());
        }
    }

    #[test]
    fn sends_first_posts_the_send_chain_before_the_receives_and_reports_alike() {
        // Short (at most one of each) and long chains: the order of the doorbells, the
        // requests themselves unchanged.
        for (sends, recvs) in [(1, 1), (0, 1), (1, 0), (3, 2), (70, 3)] {
            let o = staged(sends, recvs);
            let t = Transmit::of(&o).expect("staged");
            let mut order = Vec::new();
            post_transmit_in::<true, _, _, _>(
                &t,
                &mut order,
                |l, r| {
                    l.extend(r.iter().map(|w| w.wr_id));
                    Ok(())
                },
                |l, s| {
                    l.extend(s.iter().map(|w| w.wr_id));
                    Ok(())
                },
            )
            .expect("all posted");
            let want: Vec<u64> = (0..sends).chain(1000..1000 + recvs).collect();
            assert_eq!(order, want, "{sends} sends, {recvs} receives");
        }
        // A refused Send chain does not stop the receives; the report is the same.
        let o = staged(1, 1);
        let t = Transmit::of(&o).expect("staged");
        let mut recvs = 0;
        let f = post_transmit_in::<true, _, _, _>(
            &t,
            &mut recvs,
            |n, r| {
                *n += r.len();
                Ok(())
            },
            |_, _| {
                Err(PostError {
                    posted: 0,
                    kind: PostErrorKind::QueueFull { depth: 0 },
                })
            },
        )
        .unwrap_err();
        assert_eq!((f.recvs_posted, f.sends_posted, recvs), (1, 0, 1));
        assert_eq!(f.error.kind, PostErrorKind::QueueFull { depth: 0 });
    }

    /// A core whose transmit is one outbox, posted once.
    struct Staged(Outbox, bool);

    impl Transmitter for Staged {
        fn poll_transmit(&mut self, _: Instant) -> Option<Transmit<'_>> {
            Transmit::of(&self.0).filter(|_| !self.1)
        }
        fn on_posted(&mut self) {
            self.1 = true;
        }
        fn on_post_failed(&mut self, f: PostFailure, _: Instant) {
            panic!("refused: {f:?}");
        }
    }

    /// A queue pair that takes everything and logs the requests' ids in post order.
    #[derive(Default)]
    struct LogQp(Vec<u64>);

    impl QueuePair for LogQp {
        fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
            self.0.extend(wrs.iter().map(|w| w.wr_id));
            Ok(())
        }
        fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
            self.0.extend(wrs.iter().map(|w| w.wr_id));
            Ok(())
        }
        fn qp_num(&self) -> u32 {
            1
        }
        fn conn_id(&self) -> crate::fabric::ConnId {
            crate::fabric::ConnId(1)
        }
        fn state(&self) -> QpState {
            QpState::ReadyToSend
        }
        fn caps(&self) -> crate::fabric::QpCaps {
            crate::fabric::QpCaps::default()
        }
    }

    /// The order `transmit_staged` for provider `P` posts a call's Send (id 0) and the
    /// receive staged with it (id 1000) in, one of each and (two-request chains) two
    /// of each.
    fn staged_order<P: Provider>(sends: u64, recvs: u64) -> Vec<u64> {
        let mut core = Staged(staged(sends, recvs), false);
        let mut qp = LogQp::default();
        transmit_staged::<P, _, _>(&mut core, &mut qp, Instant::now());
        assert!(core.1, "posted and reported");
        qp.0
    }

    #[test]
    fn the_posting_order_follows_the_provider() {
        use crate::fabric::{faulty::Faulty, shm::ShmProvider, sim::Sim, siw::SiwProvider};
        // shm: only this thread's polls place messages, so the Sends go first (a
        // requester's call and a responder's reply alike).
        assert_eq!(staged_order::<ShmProvider>(1, 1), vec![0, 1000]);
        assert_eq!(staged_order::<ShmProvider>(2, 2), vec![0, 1, 1000, 1001]);
        // Everywhere else the receives go first: siw (an RNR is fatal on iWARP), sim,
        // and shm behind fault injection (which does not claim the property).
        assert_eq!(staged_order::<SiwProvider>(1, 1), vec![1000, 0]);
        assert_eq!(staged_order::<Sim>(2, 2), vec![1000, 1001, 0, 1]);
        assert_eq!(staged_order::<Faulty<ShmProvider>>(1, 1), vec![1000, 0]);
    }

    #[test]
    fn a_short_transmit_reports_a_refused_receive_or_send() {
        let o = staged(1, 1);
        let t = Transmit::of(&o).expect("staged");
        let refuse = |posted| PostError {
            posted,
            kind: PostErrorKind::QueueFull { depth: 0 },
        };
        // A refused receive does not stop the Send.
        let mut sent = 0;
        let f = post_transmit(
            &t,
            &mut sent,
            |_, _| Err(refuse(0)),
            |s, w| {
                *s += w.len();
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!((f.recvs_posted, f.sends_posted, sent), (0, 1, 1));
        // A refused Send after a posted receive; a provider's count past the chain's
        // length is clamped to it.
        let f = post_transmit(&t, &mut (), |_, _| Ok(()), |_, _| Err(refuse(3))).unwrap_err();
        assert_eq!((f.recvs_posted, f.sends_posted), (1, 1));
        let f = post_transmit(&t, &mut (), |_, _| Ok(()), |_, _| Err(refuse(0))).unwrap_err();
        assert_eq!((f.recvs_posted, f.sends_posted), (1, 0));
        assert_eq!(f.error.kind, PostErrorKind::QueueFull { depth: 0 });
    }

    #[test]
    fn a_refusal_reports_how_far_each_chain_got() {
        let o = staged(70, 3);
        let t = Transmit::of(&o).expect("staged");
        let mut calls = 0;
        let f = post_transmit(
            &t,
            &mut calls,
            |_, _| {
                Err(PostError {
                    posted: 2,
                    kind: PostErrorKind::QueueFull { depth: 2 },
                })
            },
            |c, _| {
                *c += 1;
                if *c == 2 {
                    // The second doorbell (requests 64..70) fails after one.
                    Err(PostError {
                        posted: 1,
                        kind: PostErrorKind::InvalidState(QpState::Error),
                    })
                } else {
                    Ok(())
                }
            },
        )
        .unwrap_err();
        // The refused receive chain does not stop the send chain.
        assert_eq!((f.recvs_posted, f.sends_posted), (2, 65));
        assert_eq!(f.error.kind, PostErrorKind::QueueFull { depth: 2 });
    }
}
