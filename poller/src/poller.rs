//! The poll loop run by each poller thread.
//!
//! One iteration: handle up to `mailbox_batch` mailbox commands, fire due timers (checked
//! every `timer_check_interval` iterations while any is armed), poll every task once; then,
//! if nothing did work, take one step of the idle policy. Everything the loop touches is
//! preallocated; the only shared-memory writes are the mailbox head (one per command) and
//! the counters (every `stats_interval` iterations).

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::config::PollerConfig;
use crate::handle::Shared;
use crate::idle::{IdlePolicy, IdleStep};
use crate::mailbox::{Body, Command};
use crate::ring::Consumer;
use crate::stats::PollerStats;
use crate::task::{PollCtx, Task, TaskId, TaskKey};
use crate::timer::{Nanos, TimerHeap, NEVER};

/// Most timers fired per iteration: a task that re-arms zero-delay timers from `on_timer`
/// must not starve the rest of the loop.
const TIMER_BATCH: usize = 256;

struct TaskSlot<M> {
    task: Option<Box<dyn Task<M>>>,
    gen: u32,
    active_pos: u32,
    wake_fd: Option<RawFd>,
}

/// What a task callback may reach, split from the task table so both can be borrowed at
/// once.
struct LoopEnv {
    timers: TimerHeap,
    clock: Clock,
    /// This iteration's clock reading, or [`NEVER`] if nobody needed it yet.
    now: Nanos,
    poller: u32,
}

impl LoopEnv {
    #[inline]
    fn now_ns(&mut self) -> Nanos {
        if self.now == NEVER {
            self.now = self.clock.now_ns();
        }
        self.now
    }
}

/// Runs `f` on the task in `slot` with a fresh context; returns its result and whether the
/// task asked to be removed, or `None` if the slot is empty.
#[inline]
fn with_task<M, R>(
    slot: &mut TaskSlot<M>,
    env: &mut LoopEnv,
    key: TaskKey,
    f: impl FnOnce(&mut dyn Task<M>, &mut PollCtx<'_>) -> R,
) -> Option<(R, bool)> {
    let task = slot.task.as_deref_mut()?;
    let mut ctx = PollCtx {
        timers: &mut env.timers,
        clock: &env.clock,
        now: &mut env.now,
        task: TaskId {
            poller: env.poller,
            key,
        },
        remove: false,
    };
    let r = f(task, &mut ctx);
    Some((r, ctx.remove))
}

pub(crate) struct Poller<M> {
    shared: Arc<Shared<M>>,
    rx: Consumer<Command<M>>,
    slots: Vec<TaskSlot<M>>,
    /// Occupied slot indices, dense, in poll order.
    active: Vec<u32>,
    env: LoopEnv,
    idle: IdlePolicy,
    batch: usize,
    stats_mask: u64,
    timer_mask: u64,
    /// Doorbell eventfd first, then every task wake fd; rebuilt only when tasks change.
    pollfds: Vec<libc::pollfd>,
    pollfds_dirty: bool,
    stats: PollerStats,
}

impl<M: Send + 'static> Poller<M> {
    /// Builds the loop state. Called on the poller thread after pinning, so first-touch
    /// places its memory near the core. Must be called once per `Shared`: it takes the
    /// mailbox's single consumer end.
    pub(crate) fn new(shared: Arc<Shared<M>>, config: &PollerConfig) -> Self {
        let max_tasks = shared.mailbox.slot_gens.len();
        let mut pollfds = Vec::with_capacity(max_tasks + 1);
        pollfds.push(libc::pollfd {
            fd: shared.mailbox.doorbell.eventfd_raw(),
            events: libc::POLLIN,
            revents: 0,
        });
        Poller {
            rx: Consumer::new(shared.mailbox.ring.clone()),
            slots: (0..max_tasks)
                .map(|_| TaskSlot {
                    task: None,
                    gen: 0,
                    active_pos: 0,
                    wake_fd: None,
                })
                .collect(),
            active: Vec::with_capacity(max_tasks),
            env: LoopEnv {
                timers: TimerHeap::with_capacity(config.max_timers),
                clock: Clock::new(),
                now: NEVER,
                poller: shared.index,
            },
            idle: config.idle,
            batch: config.mailbox_batch,
            stats_mask: u64::from(config.stats_interval.next_power_of_two()) - 1,
            timer_mask: u64::from(config.timer_check_interval.next_power_of_two()) - 1,
            pollfds,
            pollfds_dirty: false,
            stats: PollerStats::default(),
            shared,
        }
    }

    /// Loops until the mailbox is closed, then retires every task and returns the final
    /// counters.
    pub(crate) fn run(mut self) -> PollerStats {
        let mut idle_run: u64 = 0;
        loop {
            self.env.now = NEVER;
            let mut busy = self.drain_mailbox(self.batch) > 0;
            // `iterations` is bumped below, so the first iteration checks too.
            if self.env.timers.next_deadline() != NEVER
                && self.stats.iterations & self.timer_mask == 0
            {
                busy |= self.fire_timers() > 0;
            }
            busy |= self.poll_tasks() > 0;

            self.stats.iterations += 1;
            if busy {
                self.stats.busy_iterations += 1;
                idle_run = 0;
            } else {
                idle_run += 1;
            }
            if self.stats.iterations & self.stats_mask == 0 {
                self.publish();
            }
            if self.shared.mailbox.is_closed() {
                break;
            }
            if !busy {
                self.idle_step(idle_run);
            }
        }
        self.finish()
    }

    fn publish(&self) {
        self.shared.counters.publish(&self.stats);
    }

    fn drain_mailbox(&mut self, limit: usize) -> usize {
        let mut handled = 0;
        while handled < limit {
            let Some(cmd) = self.rx.pop() else { break };
            handled += 1;
            self.handle(cmd);
        }
        self.stats.messages += handled as u64;
        handled
    }

    fn live(&self, key: TaskKey) -> bool {
        self.slots
            .get(key.slot as usize)
            .is_some_and(|s| s.gen == key.gen && s.task.is_some())
    }

    fn handle(&mut self, cmd: Command<M>) {
        let key = cmd.key;
        match cmd.body {
            Body::Message(msg) => {
                if !self.live(key) {
                    self.stats.stale_commands += 1;
                    return;
                }
                let slot = &mut self.slots[key.slot as usize];
                let result = with_task(slot, &mut self.env, key, |t, ctx| t.on_message(msg, ctx));
                if let Some(((), true)) = result {
                    self.remove_slot(key.slot);
                }
            }
            Body::Add(task) => self.insert(key, task),
            Body::Remove => {
                if self.live(key) {
                    self.remove_slot(key.slot);
                } else {
                    self.stats.stale_commands += 1;
                }
            }
        }
    }

    fn insert(&mut self, key: TaskKey, task: Box<dyn Task<M>>) {
        let Some(slot) = self.slots.get_mut(key.slot as usize) else {
            self.stats.stale_commands += 1;
            return;
        };
        // The slot allocator hands out only free slots at their current generation; anything
        // else would mean a corrupted command, so refuse it rather than clobber a task.
        if slot.task.is_some() || slot.gen != key.gen {
            self.stats.stale_commands += 1;
            return;
        }
        slot.wake_fd = task.wake_fd();
        if slot.wake_fd.is_some() {
            self.pollfds_dirty = true;
        }
        slot.task = Some(task);
        slot.active_pos = self.active.len() as u32;
        self.active.push(key.slot);
        self.stats.tasks += 1;
    }

    fn remove_slot(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        let Some(mut task) = slot.task.take() else {
            return;
        };
        let old = TaskKey {
            slot: index,
            gen: slot.gen,
        };
        slot.gen = slot.gen.wrapping_add(1);
        let new_gen = slot.gen;
        if slot.wake_fd.take().is_some() {
            self.pollfds_dirty = true;
        }
        let pos = slot.active_pos as usize;
        self.active.swap_remove(pos);
        if let Some(&moved) = self.active.get(pos) {
            self.slots[moved as usize].active_pos = pos as u32;
        }
        self.env.timers.cancel_owner(old);
        task.on_remove();
        drop(task);
        let mailbox = &self.shared.mailbox;
        mailbox.slot_gens[index as usize].store(new_gen, std::sync::atomic::Ordering::Release);
        // Cannot fail: the queue has room for every slot and this one was not in it.
        let _ = mailbox.free_slots.push(index);
        self.stats.tasks -= 1;
    }

    fn fire_timers(&mut self) -> usize {
        let now = self.env.now_ns();
        let mut fired = 0;
        while fired < TIMER_BATCH {
            let Some(due) = self.env.timers.pop_due(now) else {
                break;
            };
            fired += 1;
            // Removal cancels a task's timers, so the owner is live; checked anyway.
            if !self.live(due.owner) {
                continue;
            }
            let slot = &mut self.slots[due.owner.slot as usize];
            let result = with_task(slot, &mut self.env, due.owner, |t, ctx| {
                t.on_timer(due.token, ctx)
            });
            if let Some(((), true)) = result {
                self.remove_slot(due.owner.slot);
            }
        }
        self.stats.timers_fired += fired as u64;
        fired
    }

    fn poll_tasks(&mut self) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.active.len() {
            let index = self.active[i];
            let slot = &mut self.slots[index as usize];
            let key = TaskKey {
                slot: index,
                gen: slot.gen,
            };
            if let Some((done, remove)) = with_task(slot, &mut self.env, key, |t, ctx| t.poll(ctx))
            {
                work += done;
                if remove {
                    // The last active task moved into position `i`; poll it next.
                    self.remove_slot(index);
                    continue;
                }
            }
            i += 1;
        }
        self.stats.work_items += work as u64;
        work
    }

    fn idle_step(&mut self, idle_run: u64) {
        match self.idle.step(idle_run) {
            IdleStep::Spin => {}
            IdleStep::Pause => core::hint::spin_loop(),
            IdleStep::Yield => std::thread::yield_now(),
            IdleStep::Park(max) => self.park(max),
        }
    }

    fn park(&mut self, max: Duration) {
        for &index in &self.active {
            if let Some(task) = self.slots[index as usize].task.as_mut() {
                if !task.before_park() {
                    return;
                }
            }
        }
        let mut timeout = max;
        let next = self.env.timers.next_deadline();
        if next != NEVER {
            // Reuses this iteration's reading if the timer check already took one.
            let now = self.env.now_ns();
            if next <= now {
                return;
            }
            timeout = timeout.min(Duration::from_nanos(next - now));
        }
        if self.pollfds_dirty {
            self.rebuild_pollfds();
        }
        let mailbox = &self.shared.mailbox;
        mailbox.doorbell.prepare_park();
        if self.rx.has_ready() || mailbox.is_closed() {
            mailbox.doorbell.cancel_park();
            return;
        }
        self.stats.parks += 1;
        // Publish first so observers see an exact picture while we sleep.
        self.shared.counters.publish(&self.stats);
        let ready = mailbox.doorbell.park(&mut self.pollfds, timeout);
        if ready > 0 {
            self.stats.wakeups += 1;
        }
    }

    fn rebuild_pollfds(&mut self) {
        // Within capacity (max_tasks + 1), so no allocation.
        self.pollfds.truncate(1);
        for &index in &self.active {
            if let Some(fd) = self.slots[index as usize].wake_fd {
                self.pollfds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        self.pollfds_dirty = false;
    }

    fn finish(mut self) -> PollerStats {
        // Senders are refused from now on, so this drains what was accepted before the
        // close (one ring's worth at most) and then stops.
        let capacity = self.shared.mailbox.ring.capacity();
        self.drain_mailbox(capacity);
        while let Some(&index) = self.active.last() {
            self.remove_slot(index);
        }
        self.publish();
        self.stats
    }
}
