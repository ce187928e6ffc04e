//! The store on a thread of its own: its writes and their fsync never block the core's loop.
//!
//! Jobs run one at a time, in the order sent, so a read sees every write sent before it. The
//! shell keeps the machine's ordering promise ("a record is durable before anything after it
//! is carried out") with a barrier: after a write it carries out nothing more until the
//! thread says the write is done ([`Done::Written`]), while the loop goes on taking events.

use std::collections::VecDeque;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use horizon_proto::{BubbleId, PlayerId, Seq};
use tokio::sync::mpsc;

use crate::machine::{Adoption, CopyAt, Effect, StoredCopy};
use crate::store::{Durable, Record};

/// What the store thread is asked to do.
#[derive(Debug)]
pub(crate) enum Job {
    Append(Record),
    PutBackup {
        bubble: BubbleId,
        epoch: u64,
        tick: u64,
        part: Option<(u32, u32)>,
        bytes: Vec<u8>,
    },
    ReadBackup(BubbleId),
    /// Keeping copies for players (not ownership: nothing waits for these).
    Pin(CopyAt, Vec<(PlayerId, Seq)>),
    Unpin(CopyAt),
    ReadPinned(Adoption),
}

impl Job {
    /// A write: nothing after it is carried out before it is done.
    pub(crate) fn writes(&self) -> bool {
        matches!(self, Job::Append(_) | Job::PutBackup { .. })
    }
}

/// The machine's effects in the order the shell carries them out: a store job goes to the
/// thread as soon as it is first in line; any other effect waits until every write sent
/// before it is done.
#[derive(Debug, Default)]
pub(crate) struct Barrier {
    waiting: VecDeque<Effect>,
    writes_in_flight: usize,
}

/// The next thing the shell does.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send this to the store thread.
    Store(Job),
    /// Carry this out now.
    Now(Effect),
}

impl Barrier {
    pub(crate) fn push(&mut self, effect: Effect) {
        self.waiting.push_back(effect);
    }

    /// The next step, or `None` while the first effect in line waits for a write.
    pub(crate) fn next(&mut self) -> Option<Step> {
        let effect = self.waiting.pop_front()?;
        let job = match effect {
            Effect::Persist(record) => Job::Append(record),
            Effect::PutBackup { bubble, epoch, tick, part, bytes } => {
                Job::PutBackup { bubble, epoch, tick, part, bytes }
            }
            Effect::ReadBackup { bubble } => Job::ReadBackup(bubble),
            Effect::PinBackup { at, players } => Job::Pin(at, players),
            Effect::UnpinBackup { at } => Job::Unpin(at),
            Effect::ReadPinned { adopt } => Job::ReadPinned(adopt),
            other if self.writes_in_flight > 0 => {
                self.waiting.push_front(other);
                return None;
            }
            other => return Some(Step::Now(other)),
        };
        if job.writes() {
            self.writes_in_flight += 1;
        }
        Some(Step::Store(job))
    }

    /// A write sent earlier is done (durable, or failed: the machine is told).
    pub(crate) fn written(&mut self) {
        self.writes_in_flight = self.writes_in_flight.saturating_sub(1);
    }
}

/// What the store thread answers.
#[derive(Debug)]
pub(crate) enum Done {
    /// A write is durable (or failed, with why).
    Written(Result<(), String>),
    /// The latest whole copy of a bubble (`None`: none, or only parts of a spread one).
    Read(BubbleId, Option<StoredCopy>),
    /// A copy kept for players was or was not kept (a failure costs only that help: logged).
    Pinned(Result<(), String>),
    /// A copy kept for players, read.
    PinnedRead(Adoption, Option<Vec<u8>>),
}

/// The handle the shell keeps. Dropping the sender lets the thread finish what is queued;
/// [`Writer::close`] waits for it (the store is flushed and its lock released).
#[derive(Debug)]
pub(crate) struct Writer {
    jobs: Option<std_mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread over `store`; each job's answer goes to `done` through `wrap`.
    pub(crate) fn start<E: Send + 'static>(
        mut store: Box<dyn Durable>,
        done: mpsc::Sender<E>,
        wrap: fn(Done) -> E,
    ) -> std::io::Result<Writer> {
        let (jobs, rx) = std_mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().name("horizon-store".into()).spawn(move || {
            for job in rx {
                let answer = run(store.as_mut(), job);
                // The loop is gone when this fails: the remaining jobs still run (flushed).
                let _ = done.blocking_send(wrap(answer));
            }
        })?;
        Ok(Writer { jobs: Some(jobs), thread: Some(thread) })
    }

    /// Queues a job (unbounded in count, bounded by the machine: each job is one of its
    /// effects). False if the thread is gone.
    pub(crate) fn send(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok())
    }

    /// Lets the thread finish every queued job and waits for it.
    pub(crate) async fn close(mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

fn run(store: &mut dyn Durable, job: Job) -> Done {
    match job {
        Job::Append(record) => Done::Written(store.append(record).map_err(|e| e.to_string())),
        Job::PutBackup { bubble, epoch, tick, part, bytes } => {
            let put = match part {
                None => store.put_backup(bubble.0, epoch, tick, &bytes),
                Some(part) => store.put_backup_part(bubble.0, epoch, part, tick, &bytes),
            };
            Done::Written(put.map_err(|e| format!("backup of bubble {} not stored: {e}", bubble.0)))
        }
        Job::ReadBackup(bubble) => Done::Read(bubble, store.latest_copy(bubble.0)),
        Job::Pin(at, players) => Done::Pinned(store.pin_backup(at, &players).map_err(|e| {
            format!("copy of bubble {} at tick {} not kept for players: {e}", at.bubble.0, at.tick)
        })),
        Job::Unpin(at) => {
            store.unpin_backup(at);
            Done::Pinned(Ok(()))
        }
        Job::ReadPinned(adopt) => {
            let copy = store.pinned_backup(adopt.from);
            Done::PinnedRead(adopt, copy)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::ErrorCode;

    fn close(why: &'static str) -> Effect {
        Effect::Close { conn: 1, code: ErrorCode::ShuttingDown, why }
    }

    fn backup(bubble: u64) -> Effect {
        Effect::PutBackup { bubble: BubbleId(bubble), epoch: 1, tick: 1, part: None, bytes: vec![] }
    }

    fn what(step: Option<Step>) -> String {
        match step {
            None => "wait".into(),
            Some(Step::Now(Effect::Close { why, .. })) => format!("now {why}"),
            Some(Step::Store(Job::PutBackup { bubble, .. })) => format!("write {}", bubble.0),
            Some(Step::Store(Job::ReadBackup(bubble))) => format!("read {}", bubble.0),
            Some(other) => format!("{other:?}"),
        }
    }

    #[test]
    fn nothing_after_a_write_goes_before_it_is_done_and_writes_go_on_at_once() {
        let mut b = Barrier::default();
        for e in [close("a"), backup(1), backup(2), close("b"), backup(3), close("c")] {
            b.push(e);
        }
        assert_eq!(what(b.next()), "now a");
        assert_eq!(what(b.next()), "write 1");
        assert_eq!(what(b.next()), "write 2", "consecutive writes go to the thread together");
        assert_eq!(what(b.next()), "wait", "b waits for writes 1 and 2");
        b.written();
        assert_eq!(what(b.next()), "wait", "and for both");
        b.push(Effect::ReadBackup { bubble: BubbleId(9) });
        b.written();
        assert_eq!(what(b.next()), "now b");
        assert_eq!(what(b.next()), "write 3");
        assert_eq!(what(b.next()), "wait");
        b.written();
        assert_eq!(what(b.next()), "now c");
        assert_eq!(what(b.next()), "read 9", "a read waits in line but holds nothing back");
        assert_eq!((what(b.next()), b.waiting.len()), ("wait".into(), 0));
    }
}
