//! A standby core (`--standby`): the ownership log in a simulated linearizable store with an
//! election lease, as etcd holds it for `[store] kind = "etcd"` (docs/running.md, "A standby
//! core").
//!
//! - The store keeps the leader's lease by its own clock (within ±0.5 % of the core's): each
//!   keep-alive it handles sets the expiry `ttl` later; a store leader change resets it to a
//!   full `ttl` from then (etcd does so: a lease may outlive its TTL).
//! - The leading core keeps the lease alive every third of the TTL and counts it by its own
//!   clock with the real rule ([`LeaseClock`]); when it may have lapsed, the core fences itself:
//!   it stops (and restarts as a standby).
//! - The standby campaigns all along: it leads once the store has expired the lease (a dead
//!   leader, or one cut from the store), and starts as a restarted core does, on the store.
//! - **I7** (at most one core grants or renews at any time): every time the running core acts
//!   (an input, a tick), its lease must still be live at the store. A core acting after its
//!   lease expired there acts beside a standby that may lead.
//!
//! Not modelled: the copies' directory being shared or not (the store keeps them), the
//! standby's own link to the store (it is always reachable), a slow store's keep-alives (etcd's
//! leader answers them from memory; a slow disk slows the log's writes only).

use super::timeline::Clock;
use super::*;

/// The election lease, µs: `[store] election_ttl_s`'s default (3 s).
pub(super) const TTL_US: u64 = 3_000_000;
/// How long after the store expired the lease the standby's campaign returns.
const CAMPAIGN_US: u64 = 20_000;

#[derive(Debug)]
pub(super) struct Election {
    /// The store's clock.
    clock: Clock,
    /// When the leader's lease expires, on the store's clock; `None`: nobody leads.
    expires: Option<u64>,
    /// The leading core's own count of it (on the core's clock: the simulation's).
    lease: Option<LeaseClock>,
    /// The term of a leader cut from the store (it stays cut, the standby that takes over is
    /// not).
    cut_term: Option<u64>,
    /// Each leader's term: events of an earlier one are dropped.
    term: u64,
}

/// What happens to the election, as events of the world's queue.
#[derive(Debug)]
pub(super) enum Step {
    /// The leader of `term` sends a keep-alive.
    KeepAlive(u64),
    /// The store handles one the leader of `term` sent at `sent` (µs).
    StoreHandles(u64, u64),
    /// Its acknowledgement reaches the leader.
    Acked(u64, u64),
    /// The leader of `term` checks whether it must fence itself.
    FenceCheck(u64),
    /// The standby's campaign returns: it leads if the lease has expired at the store.
    Campaign,
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

impl Election {
    pub(super) fn new(rng: &mut Rng) -> Election {
        let clock = Clock { offset_us: rng.below(1_000_000), rate: 1.0 + rng.range(-0.005, 0.005) };
        Election { clock, expires: None, lease: None, cut_term: None, term: 0 }
    }

    /// The leading core cannot reach the store.
    pub(super) fn cut(&self) -> bool {
        self.cut_term == Some(self.term)
    }

    /// Cuts the leading core from the store (`true`), or heals the cut.
    pub(super) fn set_cut(&mut self, cut: bool) {
        self.cut_term = cut.then_some(self.term);
    }

    /// The leader's lease has expired at the store (or nobody holds one) at global `now`.
    fn lapsed(&self, now: u64) -> bool {
        self.expires.is_none_or(|e| self.clock.local(now) >= e)
    }
}

impl World {
    /// A core starts leading at `now`: its lease granted, kept alive from here on.
    pub(super) fn lead(&mut self) {
        let now = self.time.now();
        let Some(e) = self.election.as_mut() else { return };
        e.term += 1;
        e.expires = Some(e.clock.local(now) + TTL_US);
        let lease = LeaseClock::granted(Duration::from_micros(TTL_US), Duration::from_micros(now));
        e.lease = Some(lease);
        let term = e.term;
        let next = us(lease.next_keep_alive(Duration::from_micros(now)));
        self.schedule_at(next, Event::Election(Step::KeepAlive(term)));
        self.schedule_at(us(lease.deadline()), Event::Election(Step::FenceCheck(term)));
    }

    /// The leading core is gone (killed, or fenced): the standby campaigns, and leads once the
    /// store has expired the lease.
    pub(super) fn leader_gone(&mut self) {
        let Some(e) = self.election.as_mut() else { return };
        e.lease = None;
        e.term += 1;
        self.schedule_campaign();
    }

    fn schedule_campaign(&mut self) {
        let Some(e) = &self.election else { return };
        let at = match e.expires {
            Some(local) => e.clock.global(local),
            None => self.time.now(),
        };
        self.schedule_at(at.max(self.time.now()) + CAMPAIGN_US, Event::Election(Step::Campaign));
    }

    pub(super) fn election_step(&mut self, step: Step) {
        let now = self.time.now();
        let Some(e) = self.election.as_ref() else { return };
        let (term_now, cut, lapsed, lease) = (e.term, e.cut(), e.lapsed(now), e.lease);
        match step {
            Step::KeepAlive(term) => {
                let Some(lease) = lease.filter(|_| term == term_now && self.core_up()) else {
                    return;
                };
                let next = us(lease.next_keep_alive(Duration::from_micros(now)));
                // Keep-alives go through no disk (etcd's leader answers them from memory).
                let there = self.jitter(LOCAL_US);
                self.schedule(there, Event::Election(Step::StoreHandles(term, now)));
                self.schedule_at(next, Event::Election(Step::KeepAlive(term)));
            }
            Step::StoreHandles(term, sent) => {
                if cut || term != term_now || lapsed {
                    // Unanswered (cut), or too late: an expired lease is not revived.
                    return;
                }
                if let Some(e) = self.election.as_mut() {
                    e.expires = Some(e.clock.local(now) + TTL_US);
                }
                let back = self.jitter(LOCAL_US);
                self.schedule(back, Event::Election(Step::Acked(term, sent)));
            }
            Step::Acked(term, sent) => {
                if cut || term != term_now {
                    return;
                }
                let Some(e) = self.election.as_mut() else { return };
                let Some(lease) = e.lease.as_mut() else { return };
                lease.acked(Duration::from_micros(sent), Duration::from_micros(TTL_US));
                let deadline = us(lease.deadline());
                self.schedule_at(deadline, Event::Election(Step::FenceCheck(term)));
            }
            Step::FenceCheck(term) => {
                let fenced = lease.is_some_and(|l| l.fenced(Duration::from_micros(now)));
                if term != term_now || !fenced || !self.core_up() {
                    return;
                }
                self.stats.fences += 1;
                self.note(
                    "core fenced: no keep-alive acknowledged in time; it stops leading".into(),
                );
                self.kill_core();
            }
            Step::Campaign => {
                if !lapsed {
                    // A store leader change gave the lease more time: campaign on.
                    self.schedule_campaign();
                    return;
                }
                if self.core_up() {
                    // The leader never fenced itself (I7 failed at its last act): it is
                    // replaced, as the standby would be elected beside it.
                    self.kill_core();
                }
                self.stats.takeovers += 1;
                self.note("the standby core leads".into());
                self.start_core();
            }
        }
    }

    /// The store changes leader: every lease's TTL starts again in full.
    pub(super) fn store_leader_change(&mut self) {
        let now = self.time.now();
        if let Some(e) = self.election.as_mut() {
            let local = e.clock.local(now);
            if let Some(expires) = e.expires.as_mut()
                && local < *expires
            {
                *expires = local + TTL_US;
            }
        }
    }

    /// I7: the running core is about to act (an input, a tick); its lease must be live at the
    /// store.
    pub(super) fn check_leads(&mut self, what: &str) {
        let now = self.time.now();
        let Some(e) = &self.election else { return };
        if !self.core_up() || !e.lapsed(now) {
            return;
        }
        let generation = self.stats.core_generations;
        let detail = format!(
            "core generation {generation} acts ({what}) after its election lease expired at the store: a standby may lead"
        );
        self.checker.i7(now, detail);
    }

    /// Whether a standby core campaigns on the store (`--standby`).
    pub(super) fn has_standby(&self) -> bool {
        self.election.is_some()
    }

    /// Whether the leading core is cut from the store.
    pub(super) fn store_cut(&self) -> bool {
        self.election.as_ref().is_some_and(Election::cut)
    }

    /// Cuts (or heals) the leading core's link to the store.
    pub(super) fn cut_store(&mut self, cut: bool) {
        if let Some(e) = self.election.as_mut() {
            e.set_cut(cut);
        }
    }
}
