//! The roles a bubble of this site plays in a move, as parts of the agent machine that own
//! their state: a handover's source (its stream being opened, then its server's snapshot,
//! deltas and seal going on the handover's stream, directly or round through a third site) and
//! a restore waiting for its server's first update. `bubbles.rs`, `handover.rs`, `servers.rs`,
//! `parts.rs` and `periodic.rs` decide; these keep who plays which role.

use std::collections::BTreeMap;

use horizon_proto::{BubbleId, HandoverId, Name};
use std::time::Instant;

use super::{RESTORE_DEADLINE, Token};

/// Handover sources of this site.
#[derive(Debug, Default)]
pub(super) struct Sources {
    /// Waiting for their stream: handover → (bubble, the `Prepare` order's token).
    opening: BTreeMap<HandoverId, (BubbleId, Token)>,
    /// Streaming: bubble → its handover.
    streams: BTreeMap<BubbleId, HandoverId>,
    /// Streams that go round through a third site: handover → (target, via).
    relayed: BTreeMap<HandoverId, (Name, Name)>,
}

/// Where a source's state items go.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StreamTo<'a> {
    /// The handover's own stream to the target.
    Direct(HandoverId),
    /// Round through `via` to `target`, in order behind what went before.
    Relayed { target: &'a Name, via: &'a Name },
}

impl Sources {
    /// A `Prepare` for `bubble` opens its stream to the target.
    pub(super) fn opening(&mut self, handover: HandoverId, bubble: BubbleId, token: Token) {
        self.opening.insert(handover, (bubble, token));
    }

    /// The stream of `handover` opened (or failed): the bubble and the order's token, unless
    /// the handover was abandoned meanwhile.
    pub(super) fn opened(&mut self, handover: HandoverId) -> Option<(BubbleId, Token)> {
        self.opening.remove(&handover)
    }

    /// The `Prepare` orders of `bubble` still opening, given up (their tokens).
    pub(super) fn abandon(&mut self, bubble: BubbleId) -> Vec<Token> {
        let handovers: Vec<HandoverId> =
            self.opening.iter().filter(|(_, (b, _))| *b == bubble).map(|(h, _)| *h).collect();
        handovers.into_iter().filter_map(|h| self.opening.remove(&h)).map(|(_, t)| t).collect()
    }

    /// The stream of `handover` goes round through `via` to `target`.
    pub(super) fn relayed(&mut self, handover: HandoverId, target: Name, via: Name) {
        self.relayed.insert(handover, (target, via));
    }

    /// `bubble`'s server streams its state for `handover`.
    pub(super) fn stream(&mut self, bubble: BubbleId, handover: HandoverId) {
        self.streams.insert(bubble, handover);
    }

    pub(super) fn streams(&self, bubble: BubbleId) -> bool {
        self.streams.contains_key(&bubble)
    }

    /// Where `bubble`'s state items go, while it streams.
    pub(super) fn stream_to(&self, bubble: BubbleId) -> Option<StreamTo<'_>> {
        let handover = *self.streams.get(&bubble)?;
        Some(match self.relayed.get(&handover) {
            Some((target, via)) => StreamTo::Relayed { target, via },
            None => StreamTo::Direct(handover),
        })
    }

    /// `bubble` stops streaming: its handover, whose stream is to be closed.
    pub(super) fn stop(&mut self, bubble: BubbleId) -> Option<HandoverId> {
        self.streams.remove(&bubble)
    }

    /// `handover`'s stream ends: whether it went round through a third site (then there is no
    /// stream of the shell's to close, only this record).
    pub(super) fn close(&mut self, handover: HandoverId) -> bool {
        self.relayed.remove(&handover).is_some()
    }
}

/// Restores waiting for their server's first update: bubble → (received, the order's token).
#[derive(Debug, Default)]
pub(super) struct Restores {
    waiting: BTreeMap<BubbleId, (Instant, Token)>,
}

impl Restores {
    pub(super) fn waiting(&mut self, bubble: BubbleId, now: Instant, token: Token) {
        self.waiting.insert(bubble, (now, token));
    }

    pub(super) fn is_waiting(&self, bubble: BubbleId) -> bool {
        self.waiting.contains_key(&bubble)
    }

    /// `bubble`'s restore ended (its server ran, or failed): the order's token.
    pub(super) fn ended(&mut self, bubble: BubbleId) -> Option<Token> {
        self.waiting.remove(&bubble).map(|(_, token)| token)
    }

    /// The restores waiting over [`RESTORE_DEADLINE`], with their tokens, no longer waiting.
    pub(super) fn late(&mut self, now: Instant) -> Vec<(BubbleId, Token)> {
        let late: Vec<BubbleId> = self
            .waiting
            .iter()
            .filter(|(_, (at, _))| now.saturating_duration_since(*at) > RESTORE_DEADLINE)
            .map(|(&b, _)| b)
            .collect();
        late.into_iter().filter_map(|b| self.ended(b).map(|t| (b, t))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_opens_its_stream_then_streams_directly_or_round_a_third_site_until_stopped() {
        let mut s = Sources::default();
        let (h, b) = (HandoverId(4), BubbleId(9));
        s.opening(h, b, 11);
        assert_eq!(s.opened(h), Some((b, 11)));
        assert_eq!(s.opened(h), None, "answered once");
        s.stream(b, h);
        assert_eq!(s.stream_to(b), Some(StreamTo::Direct(h)));
        let (par, mtl) = (Name::new("PAR").expect("name"), Name::new("MTL").expect("name"));
        s.relayed(h, par.clone(), mtl.clone());
        assert_eq!(s.stream_to(b), Some(StreamTo::Relayed { target: &par, via: &mtl }));
        assert_eq!(s.stop(b), Some(h));
        assert!(!s.streams(b) && s.stream_to(b).is_none());
        assert!(s.close(h), "relayed: only the record ends");
        assert!(!s.close(h), "direct now: the shell's stream closes");
    }

    #[test]
    fn a_regrant_abandons_every_prepare_of_its_bubble_still_opening() {
        let mut s = Sources::default();
        s.opening(HandoverId(1), BubbleId(9), 11);
        s.opening(HandoverId(2), BubbleId(8), 12);
        s.opening(HandoverId(3), BubbleId(9), 13);
        assert_eq!(s.abandon(BubbleId(9)), [11, 13]);
        assert_eq!(s.opened(HandoverId(1)), None);
        assert_eq!(s.opened(HandoverId(2)), Some((BubbleId(8), 12)));
    }

    #[test]
    fn a_restore_not_running_by_its_deadline_is_late_once() {
        let (mut r, now) = (Restores::default(), tokio::time::Instant::now().into_std());
        r.waiting(BubbleId(9), now, 5);
        assert!(r.is_waiting(BubbleId(9)));
        assert!(r.late(now + RESTORE_DEADLINE).is_empty(), "at the deadline: still in time");
        let later = now + RESTORE_DEADLINE + std::time::Duration::from_millis(1);
        assert_eq!(r.late(later), [(BubbleId(9), 5)]);
        assert!(r.late(later).is_empty() && r.ended(BubbleId(9)).is_none());
    }
}
