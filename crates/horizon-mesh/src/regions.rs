//! The brain's one table of regions: every zone and every bubble, each at a *slot*, under one
//! id space (design.md §1). A region's id names it whatever its kind and never changes while it
//! lives; its slot is where the tick finds it, and may change between ticks (`mesh/order.rs`
//! stores bubbles in unit order). What every region obeys — a lease, its epoch, a stall when
//! the lease runs out — is read and written here whatever the kind; what only one kind has is
//! reached through [`Regions::bubble`] or [`Regions::zone`].
//!
//! The other indices point into this table: the zone tree (`zones.rs`) holds the slots of its
//! leaves, the bubble boxes (`mesh/boxes.rs`) and each player's bubble hold bubble slots.
//!
//! A slot freed during a tick is reused only from the next one ([`Regions::release_retired`]):
//! within a tick, slots name regions, and a slot the tick still holds must not come to name
//! another.

use rustc_hash::FxHashMap;

use crate::bubble::Bubble;
use crate::ids::{BubbleId, Epoch, SiteId};
use crate::time::Time;
use crate::zones::Zone;

/// A region of either kind, as the table stores it.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// A core-site zone (`crate::zones`).
    Zone(Zone),
    /// A bubble delegated to a site (`crate::bubble`).
    Bubble(Bubble),
}

/// The two kinds of region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionKind {
    Zone,
    Bubble,
}

/// The same expression on the region of either kind (`crate::region::Region`'s own fields).
macro_rules! either {
    ($entry:expr, $r:ident => $body:expr) => {
        match $entry {
            Entry::Zone($r) => $body,
            Entry::Bubble($r) => $body,
        }
    };
}

impl Entry {
    pub fn id(&self) -> BubbleId {
        either!(self, r => r.id)
    }

    pub fn site(&self) -> SiteId {
        either!(self, r => r.site)
    }

    pub fn epoch(&self) -> Epoch {
        either!(self, r => r.epoch)
    }

    pub fn stalled_since(&self) -> Option<Time> {
        either!(self, r => r.stalled_since)
    }

    /// Whether `site` holds it and renews its lease.
    pub fn runs_at(&self, site: SiteId) -> bool {
        either!(self, r => r.runs_at(site))
    }

    /// Granted (again) under `epoch`: it runs, no longer stalled.
    pub(crate) fn granted(&mut self, epoch: Epoch) {
        either!(self, r => (r.epoch, r.stalled_since) = (epoch, None));
    }

    /// Its lease ran out at `since`: it waits to be granted again.
    pub(crate) fn stall(&mut self, since: Time) {
        either!(self, r => r.stalled_since = Some(since));
    }

    pub fn is_zone(&self) -> bool {
        matches!(self, Entry::Zone(_))
    }
}

/// Every region, by slot and by id.
#[derive(Clone, Debug, Default)]
pub struct Regions {
    slots: Vec<Option<Entry>>,
    /// Region id → slot, for every region of either kind.
    index: FxHashMap<BubbleId, u32>,
    free: Vec<u32>,
    /// Freed during this tick: reusable from the next one.
    retired: Vec<u32>,
    bubbles: usize,
}

impl Regions {
    /// Stores a new region at a free slot (or a new one). Its id must be new.
    pub(crate) fn insert(&mut self, entry: Entry) -> u32 {
        let id = entry.id();
        self.bubbles += usize::from(!entry.is_zone());
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(entry);
                s
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() as u32 - 1
            }
        };
        let previous = self.index.insert(id, slot);
        debug_assert!(previous.is_none(), "region id {id} stored twice");
        slot
    }

    /// Ends the region at `slot`; its slot is reused from the next tick.
    pub(crate) fn remove(&mut self, slot: u32) -> Option<Entry> {
        let entry = self.slots.get_mut(slot as usize)?.take()?;
        self.index.remove(&entry.id());
        self.bubbles -= usize::from(!entry.is_zone());
        self.retired.push(slot);
        Some(entry)
    }

    /// The slots freed during the tick that ends become reusable.
    pub(crate) fn release_retired(&mut self) {
        self.free.append(&mut self.retired);
    }

    /// Whether slots were freed since the last [`Regions::release_retired`].
    pub(crate) fn has_retired(&self) -> bool {
        !self.retired.is_empty()
    }

    /// The slot of region `id`.
    pub fn slot(&self, id: BubbleId) -> Option<u32> {
        self.index.get(&id).copied()
    }

    pub fn get(&self, slot: u32) -> Option<&Entry> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, slot: u32) -> Option<&mut Entry> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// The bubble at `slot` (`None`: a zone, or a free slot).
    pub fn bubble(&self, slot: u32) -> Option<&Bubble> {
        match self.get(slot)? {
            Entry::Bubble(b) => Some(b),
            Entry::Zone(_) => None,
        }
    }

    pub(crate) fn bubble_mut(&mut self, slot: u32) -> Option<&mut Bubble> {
        match self.get_mut(slot)? {
            Entry::Bubble(b) => Some(b),
            Entry::Zone(_) => None,
        }
    }

    /// The zone at `slot` (`None`: a bubble, or a free slot).
    pub fn zone(&self, slot: u32) -> Option<&Zone> {
        match self.get(slot)? {
            Entry::Zone(z) => Some(z),
            Entry::Bubble(_) => None,
        }
    }

    pub(crate) fn zone_mut(&mut self, slot: u32) -> Option<&mut Zone> {
        match self.get_mut(slot)? {
            Entry::Zone(z) => Some(z),
            Entry::Bubble(_) => None,
        }
    }

    /// The number of slots, live or free: every per-slot array of the tick has this length.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Every region with its slot, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.slots.iter().enumerate().filter_map(|(s, e)| Some((s as u32, e.as_ref()?)))
    }

    /// Every bubble, in slot order.
    pub fn bubbles(&self) -> impl Iterator<Item = &Bubble> {
        self.slots.iter().filter_map(|e| match e {
            Some(Entry::Bubble(b)) => Some(b),
            _ => None,
        })
    }

    /// Every zone, in slot order.
    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.slots.iter().filter_map(|e| match e {
            Some(Entry::Zone(z)) => Some(z),
            _ => None,
        })
    }

    pub fn bubble_count(&self) -> usize {
        self.bubbles
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Stores the regions again, `first` (slots, each once) first and every other region after
    /// them in slot order, with no free slot between them. Returns each old slot's new one
    /// (`u32::MAX` for a slot that was free). Between ticks only (no slot retired).
    pub(crate) fn renumber(&mut self, first: impl Iterator<Item = u32>) -> Vec<u32> {
        debug_assert!(self.retired.is_empty(), "between ticks only");
        let mut new_of_old = vec![u32::MAX; self.slots.len()];
        let mut slots: Vec<Option<Entry>> = Vec::with_capacity(self.index.len());
        for slot in first.chain(0..self.slots.len() as u32) {
            if let Some(e) = self.slots[slot as usize].take() {
                new_of_old[slot as usize] = slots.len() as u32;
                slots.push(Some(e));
            }
        }
        self.slots = slots;
        self.free.clear();
        for slot in self.index.values_mut() {
            *slot = new_of_old[*slot as usize];
        }
        new_of_old
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::{Aabb, Vec3};
    use crate::ids::WorldId;
    use crate::region::Region;
    use crate::zones::ZoneState;

    fn zone(id: u64) -> Entry {
        Entry::Zone(Region {
            id: BubbleId(id),
            site: SiteId(0),
            world: WorldId(0),
            bounds: Aabb::point(Vec3::ZERO).expand(10.0),
            epoch: Epoch(1),
            stalled_since: None,
            players: 0,
            kind: ZoneState { load: Default::default() },
        })
    }

    #[test]
    fn a_slot_freed_in_a_tick_is_reused_only_from_the_next_one() {
        let mut r = Regions::default();
        let a = r.insert(zone(1));
        assert_eq!(r.slot(BubbleId(1)), Some(a));
        assert!(r.remove(a).is_some());
        assert_eq!(r.slot(BubbleId(1)), None);
        let b = r.insert(zone(2));
        assert_ne!(a, b, "not within the tick that freed it");
        r.release_retired();
        assert_eq!(r.insert(zone(3)), a);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn the_lease_fields_are_the_same_whatever_the_kind() {
        let mut r = Regions::default();
        let s = r.insert(zone(1));
        let e = r.get_mut(s).unwrap();
        e.stall(Time::from_ms(5));
        assert_eq!(e.stalled_since(), Some(Time::from_ms(5)));
        e.granted(Epoch(9));
        assert_eq!((e.epoch(), e.stalled_since()), (Epoch(9), None));
        assert!(r.bubble(s).is_none() && r.zone(s).is_some());
    }

    #[test]
    fn renumbering_puts_the_given_slots_first_and_closes_the_gaps() {
        let mut r = Regions::default();
        for id in 1..=4 {
            r.insert(zone(id));
        }
        r.remove(1);
        r.release_retired();
        let new_of_old = r.renumber([3, 0].into_iter());
        assert_eq!(new_of_old, vec![1, u32::MAX, 2, 0]);
        assert_eq!(r.slot(BubbleId(4)), Some(0));
        assert_eq!(r.slot(BubbleId(1)), Some(1));
        assert_eq!(r.slot(BubbleId(3)), Some(2));
        assert_eq!(r.slots(), 3);
    }
}
