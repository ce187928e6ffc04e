//! Leases and fencing (design.md §6).
//!
//! A lease is the right to write one region: a holder, an [`Epoch`] and an expiry. Epochs are
//! `generation << 32 | counter`: the core persists a new generation before serving, so epochs never
//! go backwards across restarts, and the counter makes them strictly increasing per region.
//!
//! The holder counts validity on its own monotonic clock from when it *sent* the renewal, so it
//! always stops before the core's view of the expiry (`received + ttl`). After an expiry the core
//! re-grants the region only once `expiry + drift margin` has passed.

use std::collections::BTreeMap;
use std::fmt::Debug;

use crate::ids::{Epoch, Generation};
use crate::time::{Span, Time};

/// Why a lease operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError<H: Debug> {
    #[error("region is leased to {holder:?} until {until} (expiry plus drift margin)")]
    Held { holder: H, until: Time },
    #[error("epoch {given} is not current (current {current:?})")]
    Fenced { given: Epoch, current: Option<Epoch> },
    #[error("no lease for this region")]
    NoLease,
    #[error("lease expired at {0}; ask for a new grant")]
    Expired(Time),
    #[error("epoch counter exhausted for generation {0:?}: restart the core with a new generation")]
    EpochsExhausted(Generation),
}

/// A lease's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    Active,
    /// Not renewed in time: the holder has stopped; re-grant after the drift margin.
    Expired,
    /// Expired and its drift margin has passed: another holder may be granted it now.
    Regrantable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease<H> {
    pub holder: H,
    pub epoch: Epoch,
    /// The core's view of the expiry (later than the holder's own).
    pub expires_at: Time,
    pub state: LeaseState,
}

/// The core's lease table for regions `R` held by `H` (a site, or a server).
#[derive(Clone, Debug)]
pub struct LeaseTable<R, H> {
    generation: Generation,
    counter: u32,
    ttl: Span,
    drift: Span,
    leases: BTreeMap<R, Lease<H>>,
    /// The newest epoch ever issued per region, kept after revocation.
    newest: BTreeMap<R, Epoch>,
}

impl<R: Copy + Ord + Debug, H: Copy + Eq + Debug> LeaseTable<R, H> {
    /// A table for a core running as `generation` (which the caller has persisted).
    pub fn new(generation: Generation, ttl: Span, drift: Span) -> Self {
        LeaseTable {
            generation,
            counter: 0,
            ttl,
            drift,
            leases: BTreeMap::new(),
            newest: BTreeMap::new(),
        }
    }

    pub fn generation(&self) -> Generation {
        self.generation
    }

    fn next_epoch(&mut self) -> Result<Epoch, LeaseError<H>> {
        self.counter =
            self.counter.checked_add(1).ok_or(LeaseError::EpochsExhausted(self.generation))?;
        Ok(Epoch::new(self.generation, self.counter))
    }

    fn issue(&mut self, region: R, holder: H, now: Time) -> Result<Lease<H>, LeaseError<H>> {
        let epoch = self.next_epoch()?;
        let lease = Lease { holder, epoch, expires_at: now + self.ttl, state: LeaseState::Active };
        self.leases.insert(region, lease);
        self.newest.insert(region, epoch);
        Ok(lease)
    }

    /// Grants a region to `holder` with a new epoch: creation, or re-grant after an expiry.
    /// Refused while another holder's lease (plus drift margin) still runs.
    pub fn grant(&mut self, region: R, holder: H, now: Time) -> Result<Lease<H>, LeaseError<H>> {
        if let Some(l) = self.leases.get(&region) {
            let until = l.expires_at + self.drift;
            if now < until {
                return Err(LeaseError::Held { holder: l.holder, until });
            }
        }
        self.issue(region, holder, now)
    }

    /// Takes back a lease granted before a core restart (its holder may still run it): active
    /// from `now` for a full ttl, so the holder has time to re-register and renew. Refused if
    /// the region has a lease, or `epoch` is not older than this generation's epochs.
    pub fn restore(
        &mut self,
        region: R,
        holder: H,
        epoch: Epoch,
        now: Time,
    ) -> Result<Lease<H>, LeaseError<H>> {
        let current = self.leases.get(&region).map(|l| l.epoch);
        if current.is_some() || epoch >= Epoch::new(self.generation, 0) {
            return Err(LeaseError::Fenced { given: epoch, current });
        }
        let lease = Lease { holder, epoch, expires_at: now + self.ttl, state: LeaseState::Active };
        self.leases.insert(region, lease);
        let newest = self.newest.entry(region).or_insert(epoch);
        *newest = (*newest).max(epoch);
        Ok(lease)
    }

    /// A new epoch for a region nobody leases (the brain ended it), leased to nobody: the core
    /// restores such a region from its copy for a moment, to hand its players' states on, and
    /// the new epoch fences its last holder off. Refused while the region is leased.
    pub fn mint(&mut self, region: R) -> Result<Epoch, LeaseError<H>> {
        if let Some(l) = self.leases.get(&region) {
            return Err(LeaseError::Held { holder: l.holder, until: l.expires_at + self.drift });
        }
        let epoch = self.next_epoch()?;
        self.newest.insert(region, epoch);
        Ok(epoch)
    }

    /// Hands a region over (design.md §5): the source sealed at epoch `from`, so the target gets
    /// a new epoch at once. Refused if `from` is not the current epoch.
    pub fn transfer(
        &mut self,
        region: R,
        from: Epoch,
        to: H,
        now: Time,
    ) -> Result<Lease<H>, LeaseError<H>> {
        let current = self.leases.get(&region).map(|l| l.epoch);
        if current != Some(from) {
            return Err(LeaseError::Fenced { given: from, current });
        }
        self.issue(region, to, now)
    }

    /// Renews one lease of a batch (one message per agent). Returns the core's new expiry.
    pub fn renew(
        &mut self,
        region: R,
        holder: H,
        epoch: Epoch,
        now: Time,
    ) -> Result<Time, LeaseError<H>> {
        let ttl = self.ttl;
        let l = self.leases.get_mut(&region).ok_or(LeaseError::NoLease)?;
        if l.epoch != epoch || l.holder != holder {
            return Err(LeaseError::Fenced { given: epoch, current: Some(l.epoch) });
        }
        if l.state != LeaseState::Active || now >= l.expires_at {
            if l.state == LeaseState::Active {
                l.state = LeaseState::Expired;
            }
            return Err(LeaseError::Expired(l.expires_at));
        }
        l.expires_at = now + ttl;
        Ok(l.expires_at)
    }

    /// Ends a lease (region deleted or merged away). The epoch stays the newest seen.
    pub fn revoke(&mut self, region: R, epoch: Epoch) -> Result<(), LeaseError<H>> {
        let current = self.leases.get(&region).map(|l| l.epoch);
        if current != Some(epoch) {
            return Err(LeaseError::Fenced { given: epoch, current });
        }
        self.leases.remove(&region);
        Ok(())
    }

    /// The fencing check every sink calls: is `epoch` the newest issued for `region`?
    pub fn is_current(&self, region: R, epoch: Epoch) -> bool {
        self.newest.get(&region) == Some(&epoch) && self.leases.contains_key(&region)
    }

    pub fn get(&self, region: R) -> Option<&Lease<H>> {
        self.leases.get(&region)
    }

    /// Marks leases whose expiry has passed and returns them (each once); leases whose drift
    /// margin has also passed become [`LeaseState::Regrantable`], counted in the second value.
    pub fn expire(&mut self, now: Time) -> (Vec<(R, Lease<H>)>, usize) {
        let mut out = Vec::new();
        let mut regrantable = 0;
        for (r, l) in self.leases.iter_mut() {
            if l.state == LeaseState::Active && now >= l.expires_at {
                l.state = LeaseState::Expired;
                out.push((*r, *l));
            }
            if l.state == LeaseState::Expired && now >= l.expires_at + self.drift {
                l.state = LeaseState::Regrantable;
                regrantable += 1;
            }
        }
        (out, regrantable)
    }

    /// The next time something happens on its own: an expiry, or the end of a drift margin
    /// (never a time already handled: a lease past its margin waits for whoever re-grants it).
    pub fn poll_timeout(&self) -> Option<Time> {
        self.leases
            .values()
            .filter_map(|l| match l.state {
                LeaseState::Active => Some(l.expires_at),
                LeaseState::Expired => Some(l.expires_at + self.drift),
                LeaseState::Regrantable => None,
            })
            .min()
    }

    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }
}

/// The check a state sink keeps (universe backup, delta stream, cross-region messages): it admits a
/// write only if its epoch is at least the newest it has seen for that region.
#[derive(Clone, Debug, Default)]
pub struct EpochFence<R> {
    newest: BTreeMap<R, Epoch>,
}

/// A write refused by an [`EpochFence`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stale epoch {given}: newest seen is {newest}")]
pub struct StaleEpoch {
    pub given: Epoch,
    pub newest: Epoch,
}

impl<R: Copy + Ord> EpochFence<R> {
    pub fn new() -> Self {
        EpochFence { newest: BTreeMap::new() }
    }

    pub fn admit(&mut self, region: R, epoch: Epoch) -> Result<(), StaleEpoch> {
        let newest = self.newest.entry(region).or_insert(epoch);
        if epoch < *newest {
            return Err(StaleEpoch { given: epoch, newest: *newest });
        }
        *newest = epoch;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Table = LeaseTable<u32, char>;

    fn table(generation: u32) -> Table {
        LeaseTable::new(Generation(generation), Span::from_secs(30), Span::from_secs(2))
    }

    #[test]
    fn grant_refused_while_held_then_allowed_after_margin() {
        let mut t = table(1);
        let a = t.grant(7, 'a', Time::ZERO).unwrap();
        assert_eq!(
            t.grant(7, 'b', Time::from_secs(31)),
            Err(LeaseError::Held { holder: 'a', until: Time::from_secs(32) })
        );
        assert_eq!(t.expire(Time::from_secs(30)).0.len(), 1);
        assert!(t.expire(Time::from_secs(31)).0.is_empty(), "expired leases are reported once");
        assert_eq!(t.poll_timeout(), Some(Time::from_secs(32)), "the margin's end is due");
        assert_eq!(t.expire(Time::from_secs(32)), (vec![], 1), "re-grantable now, said once");
        assert_eq!(t.poll_timeout(), None, "nothing more happens on its own: no busy loop");
        assert_eq!(t.expire(Time::from_secs(40)), (vec![], 0));
        let b = t.grant(7, 'b', Time::from_secs(32)).unwrap();
        assert!(b.epoch > a.epoch);
        assert!(!t.is_current(7, a.epoch));
        assert!(t.is_current(7, b.epoch));
    }

    #[test]
    fn an_ended_region_gets_a_newer_epoch_leased_to_nobody() {
        let mut t = table(1);
        let a = t.grant(7, 'a', Time::ZERO).unwrap();
        assert!(matches!(t.mint(7), Err(LeaseError::Held { holder: 'a', .. })), "still leased");
        t.revoke(7, a.epoch).unwrap();
        let minted = t.mint(7).unwrap();
        assert!(minted > a.epoch, "epochs stay increasing per region");
        assert!(t.get(7).is_none(), "nobody holds it: nothing to renew");
        assert!(!t.is_current(7, a.epoch));
        let b = t.grant(7, 'b', Time::from_secs(1)).unwrap();
        assert!(b.epoch > minted);
    }

    #[test]
    fn renewal_extends_and_fences_old_epochs() {
        let mut t = table(1);
        let a = t.grant(1, 'a', Time::ZERO).unwrap();
        assert_eq!(t.renew(1, 'a', a.epoch, Time::from_secs(20)), Ok(Time::from_secs(50)));
        let b = t.transfer(1, a.epoch, 'b', Time::from_secs(21)).unwrap();
        assert!(matches!(
            t.renew(1, 'a', a.epoch, Time::from_secs(22)),
            Err(LeaseError::Fenced { .. })
        ));
        assert!(matches!(
            t.transfer(1, a.epoch, 'c', Time::from_secs(22)),
            Err(LeaseError::Fenced { .. })
        ));
        assert!(t.renew(1, 'b', b.epoch, Time::from_secs(22)).is_ok());
        assert_eq!(
            t.renew(1, 'b', b.epoch, Time::from_secs(60)),
            Err(LeaseError::Expired(Time::from_secs(52)))
        );
    }

    #[test]
    fn epochs_never_go_backwards_across_generations() {
        let mut old = table(1);
        let mut last = Epoch(0);
        for _ in 0..5 {
            last = old.grant(1, 'a', Time::from_secs(100)).map(|l| l.epoch).unwrap_or(last);
            old.revoke(1, last).unwrap();
        }
        let mut restarted = table(2);
        let first = restarted.grant(1, 'a', Time::ZERO).unwrap().epoch;
        assert!(first > last);
    }

    #[test]
    fn fence_rejects_older_epochs() {
        let mut f = EpochFence::new();
        assert!(f.admit(1, Epoch(5)).is_ok());
        assert!(f.admit(1, Epoch(5)).is_ok());
        assert_eq!(f.admit(1, Epoch(4)), Err(StaleEpoch { given: Epoch(4), newest: Epoch(5) }));
        assert!(f.admit(2, Epoch(1)).is_ok(), "regions are fenced independently");
    }

    proptest::proptest! {
        /// Whatever the sequence of operations, a region never has two holders with a valid lease
        /// at once, and issued epochs strictly increase per region.
        #[test]
        fn never_two_writers(ops in proptest::collection::vec((0u8..4, 0u32..3, 0u8..3, 0u64..5_000), 1..200)) {
            let mut t = table(3);
            let mut now = Time::ZERO;
            let mut last_epoch: BTreeMap<u32, Epoch> = BTreeMap::new();
            // What each holder believes: region -> (epoch, valid until by its own clock).
            let mut believed: BTreeMap<(u32, char), (Epoch, Time)> = BTreeMap::new();
            for (op, region, who, dt) in ops {
                now = now + Span::from_ms(dt * 10);
                let holder = ['a', 'b', 'c'][who as usize];
                let issued = match op {
                    0 => t.grant(region, holder, now).ok(),
                    1 => t.get(region).map(|l| l.epoch).and_then(|e| t.transfer(region, e, holder, now).ok()),
                    2 => {
                        if let Some(&(e, _)) = believed.get(&(region, holder)) {
                            // The holder sent the renewal at `now`: valid until now + ttl by its clock.
                            if t.renew(region, holder, e, now).is_ok() {
                                believed.insert((region, holder), (e, now + Span::from_secs(30)));
                            }
                        }
                        None
                    }
                    _ => { t.expire(now); None }
                };
                if let Some(l) = issued {
                    if let Some(prev) = last_epoch.insert(region, l.epoch) {
                        proptest::prop_assert!(l.epoch > prev);
                    }
                    if op == 1 {
                        // A transfer follows the old holder's seal: it has stopped writing.
                        believed.retain(|&(r, _), _| r != region);
                    }
                    believed.insert((region, holder), (l.epoch, now + Span::from_secs(30)));
                }
                for r in 0..3 {
                    let writers = ['a', 'b', 'c'].iter()
                        .filter(|&&h| believed.get(&(r, h)).is_some_and(|&(_, until)| now < until))
                        .count();
                    proptest::prop_assert!(writers <= 1, "two writers on region {r} at {now}");
                }
            }
        }
    }
}
