//! Virtual time: the run's clock (global µs from 0 to the end), each site's own drifting clock,
//! the queue of what happens next, and the order kept on each ordered stream.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use super::Event;

/// An event due at `at` (global µs); `seq` keeps events due at once in the order scheduled.
struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A site's clock: `offset + rate · t`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    pub(super) offset_us: u64,
    pub(super) rate: f64,
}

impl Clock {
    pub(super) fn local(&self, t: u64) -> u64 {
        self.offset_us + (t as f64 * self.rate) as u64
    }
    pub(super) fn global(&self, local: u64) -> u64 {
        (local.saturating_sub(self.offset_us) as f64 / self.rate).ceil() as u64
    }
}

/// The run's time and what is due.
pub(super) struct Timeline {
    now: u64,
    end: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    next_seq: u64,
    /// The machines' instants count from here (a fixed `Instant`: nothing printed depends on it).
    origin: Instant,
    clocks: Vec<Clock>,
    /// Per ordered stream, the time of its last delivery (streams stay in order).
    fifo: BTreeMap<(u8, usize, usize, u64), u64>,
}

impl Timeline {
    /// At 0, running to `end` (global µs), each site's clock as `clocks` says.
    pub(super) fn new(end: u64, origin: Instant, clocks: Vec<Clock>) -> Self {
        Timeline {
            now: 0,
            end,
            queue: BinaryHeap::new(),
            next_seq: 0,
            origin,
            clocks,
            fifo: BTreeMap::new(),
        }
    }

    /// Global µs since the start.
    pub(super) fn now(&self) -> u64 {
        self.now
    }

    /// `event` at `at`, or now if `at` is past.
    pub(super) fn schedule_at(&mut self, at: u64, event: Event) {
        self.next_seq += 1;
        self.queue.push(Reverse(Scheduled { at: at.max(self.now), seq: self.next_seq, event }));
    }

    /// The next event due before the end, the clock moved to it; `None` at the end (the clock
    /// then reads the end).
    pub(super) fn next(&mut self) -> Option<Event> {
        match self.queue.pop() {
            Some(Reverse(next)) if next.at <= self.end => {
                self.now = next.at;
                Some(next.event)
            }
            _ => {
                self.now = self.end;
                None
            }
        }
    }

    /// Now by `site`'s clock, as the machines there see it.
    pub(super) fn instant(&self, site: usize) -> Instant {
        self.origin + Duration::from_micros(self.clocks[site].local(self.now))
    }

    /// Now by `site`'s clock, in µs.
    pub(super) fn local_us(&self, site: usize) -> u64 {
        self.clocks[site].local(self.now)
    }

    /// The global time at which `site`'s clock reads `local` µs.
    pub(super) fn global(&self, site: usize, local: u64) -> u64 {
        self.clocks[site].global(local)
    }

    /// The global time at which `site`'s clock reads `instant`.
    pub(super) fn global_of(&self, site: usize, instant: Instant) -> u64 {
        self.global(site, instant.duration_since(self.origin).as_micros() as u64)
    }

    /// `at` for an item of an ordered stream: never before the stream's previous item.
    pub(super) fn in_order(&mut self, key: (u8, usize, usize, u64), at: u64) -> u64 {
        let last = self.fifo.entry(key).or_insert(0);
        let at = at.max(*last);
        *last = at;
        at
    }
}
