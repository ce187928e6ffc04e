//! A handover between two sites (design.md §5) as an explicit state machine: one step at a
//! time, each step an order to an agent whose reply moves it on.
//!
//! ```text
//!  PreparingTarget ──Prepared──► SendingMembers ──Done──► PreparingSource ──Done──► Freezing
//!        │                            │                        │                      │
//!        └──────── error: abandoned before the freeze (Regrant to the source) ───────┘ │
//!                                                                          Frozen ◄──Frozen
//!  target's `Started` (in Freezing or Frozen) ──► committed
//!  no commit within the deadline once the freeze is sent ──► the target's epoch is no longer
//!  renewed: its lease runs out and the brain fails the bubble over (restore from the backup)
//! ```

use crate::stats::HandoverOutcome;
use crate::status::EventKind;
use std::collections::BTreeSet;

use horizon_mesh::{SiteId, Span, Time};
use horizon_proto::control;
use horizon_proto::{
    BubbleId, Epoch, ErrorCode, Failure, Fault, HandoverId, Lease, LeaseRef, PlayerId, Region,
    WorldId,
};

use super::{Awaiting, CoreMachine, Lane};

/// How long a handover target has to get ready, from `Prepare`.
pub(crate) const PREPARE_DEADLINE_MS: u32 = 5_000;
/// A handover not committed this long after it started is given up: before the freeze it is
/// abandoned, after it the target's epoch is no longer renewed.
pub(crate) const HANDOVER_DEADLINE: Span = Span::from_ms(15_000);

/// Where a handover is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandoverPhase {
    /// `Prepare` sent to the target (its server stands by under the new epoch).
    PreparingTarget,
    /// `Members` sent to the target (where the players' updates go once it runs).
    SendingMembers,
    /// `Prepare` sent to the source (it opens the transfer and streams snapshot and deltas).
    PreparingSource,
    /// `Freeze` sent to the source. From here the source may have sealed: the handover can
    /// only commit or fail over, never be abandoned.
    Freezing,
    /// The source sealed at this time; the target starts when the seal lands.
    Frozen { at: Time },
}

impl HandoverPhase {
    /// The freeze was sent: the source may have sealed.
    pub(crate) fn freeze_sent(self) -> bool {
        matches!(self, HandoverPhase::Freezing | HandoverPhase::Frozen { .. })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HandoverPhase::PreparingTarget => "preparing_target",
            HandoverPhase::SendingMembers => "sending_members",
            HandoverPhase::PreparingSource => "preparing_source",
            HandoverPhase::Freezing => "freezing",
            HandoverPhase::Frozen { .. } => "frozen",
        }
    }
}

/// One handover in flight.
#[derive(Clone, Debug)]
pub(crate) struct Handover {
    pub(crate) id: HandoverId,
    pub(crate) bubble: BubbleId,
    pub(crate) from: SiteId,
    pub(crate) to: SiteId,
    /// The target's pre-authorised epoch.
    pub(crate) epoch: u64,
    pub(crate) started: Time,
    pub(crate) phase: HandoverPhase,
    /// Past its deadline after the freeze: the target's epoch is no longer renewed.
    pub(crate) given_up: bool,
}

/// What a step's reply means for the handover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send the next order of the handover (the phase has moved on).
    Next(HandoverPhase),
    /// The source froze and sealed at this tick.
    Frozen(u64),
    /// The step failed; `freeze_sent` says whether the source may have sealed.
    Failed { why: String, freeze_sent: bool },
    /// A reply for a phase the handover has left (a retried or late answer): nothing to do.
    Stale,
}

impl Handover {
    /// The reply (or error) to the order sent in `phase` arrived.
    pub(crate) fn on_reply(
        &mut self,
        phase: HandoverPhase,
        reply: Result<&horizon_proto::control::Reply, &Failure>,
        now: Time,
    ) -> Step {
        use horizon_proto::control::Reply;
        if phase != self.phase {
            return Step::Stale;
        }
        let fail = |why: String| Step::Failed { why, freeze_sent: phase.freeze_sent() };
        let reply = match reply {
            Ok(r) => r,
            Err(e) => return fail(format!("{}: {e}", phase.as_str())),
        };
        match (phase, reply) {
            (HandoverPhase::PreparingTarget, Reply::Prepared { .. }) => {
                self.phase = HandoverPhase::SendingMembers;
                Step::Next(self.phase)
            }
            (HandoverPhase::SendingMembers, Reply::Done) => {
                self.phase = HandoverPhase::PreparingSource;
                Step::Next(self.phase)
            }
            (HandoverPhase::PreparingSource, Reply::Done) => {
                self.phase = HandoverPhase::Freezing;
                Step::Next(self.phase)
            }
            (HandoverPhase::Freezing, Reply::Frozen { tick, .. }) => {
                self.phase = HandoverPhase::Frozen { at: now };
                Step::Frozen(tick.0)
            }
            (p, other) => fail(format!("{}: replied {other:?}", p.as_str())),
        }
    }

    /// Past its deadline at `now`.
    pub(crate) fn overdue(&self, now: Time) -> bool {
        now >= self.started + HANDOVER_DEADLINE
    }
}

// ---- orchestration -------------------------------------------------------------------------

impl CoreMachine {
    /// The handover `id`, while it is under way.
    pub(crate) fn handover(&self, id: HandoverId) -> Option<&Handover> {
        self.handovers.get(&id)
    }

    /// Handovers under way.
    pub(crate) fn handovers_in_flight(&self) -> usize {
        self.handovers.len()
    }

    /// The brain moved `bubble` from `from` to `to` under `epoch`: start the handover with its
    /// first step, `Prepare` to the target.
    pub(crate) fn start_handover(
        &mut self,
        bubble: BubbleId,
        from: SiteId,
        to: SiteId,
        epoch: u64,
        reason: &str,
        now: Time,
    ) {
        let Some(players) = self.registry.get(&bubble).map(|r| r.members().len()) else { return };
        if !self.agents.has(from) || !self.agents.has(to) {
            tracing::warn!(bubble = bubble.0, "handover abandoned: it needs both agents connected");
            self.stats.handover(from, to, HandoverOutcome::Abandoned, None);
            self.abandon_move(bubble, from, epoch, now);
            return;
        }
        let id = HandoverId(self.next_handover);
        self.next_handover += 1;
        tracing::info!(handover = id.0, bubble = bubble.0, from = %self.cfg.sites.name(from), to = %self.cfg.sites.name(to), reason, players, "handover starting");
        if let Some(r) = self.registry.get_mut(&bubble) {
            r.moving_by(id);
        }
        let phase = HandoverPhase::PreparingTarget;
        let handover =
            Handover { id, bubble, from, to, epoch, started: now, phase, given_up: false };
        self.handovers.insert(id, handover);
        self.send_step(id, now);
    }

    /// Sends the order of the handover's current phase.
    fn send_step(&mut self, id: HandoverId, now: Time) {
        let Some(h) = self.handovers.get(&id).cloned() else { return };
        let Some(reg_epoch) = self.registry.get(&h.bubble).map(|r| r.epoch()) else { return };
        let lease = match h.phase {
            HandoverPhase::PreparingTarget => Some(self.lease(h.bubble, h.epoch, now)),
            HandoverPhase::PreparingSource => Some(self.lease(h.bubble, reg_epoch, now)),
            _ => None,
        };
        let Some(reg) = self.registry.get(&h.bubble) else { return };
        let prepare = |machine: &Self, lease: Lease| control::Request::Prepare {
            handover: id,
            bubble: h.bubble,
            source: machine.site_name(h.from),
            target: machine.site_name(h.to),
            target_addr: machine
                .agents
                .get(h.to)
                .map(|a| a.transfer_addr.clone())
                .unwrap_or_default(),
            lease,
            deadline_ms: PREPARE_DEADLINE_MS,
        };
        let (site, request) = match h.phase {
            HandoverPhase::PreparingTarget | HandoverPhase::PreparingSource => {
                let Some(lease) = lease else { return };
                let site = if h.phase == HandoverPhase::PreparingTarget { h.to } else { h.from };
                (site, prepare(self, lease))
            }
            HandoverPhase::SendingMembers => {
                let members = control::Request::Members {
                    lease: LeaseRef { bubble: h.bubble, epoch: Epoch(h.epoch) },
                    players: self.member_list(reg, &BTreeSet::new()),
                    departed: Vec::new(),
                };
                (h.to, members)
            }
            HandoverPhase::Freezing => {
                // From the freeze on, the target may run the bubble: a core restarted before
                // the outcome is stored must know (see `Hosted::fallback`). Stored before the
                // freeze leaves.
                self.persist(crate::store::Record::Handover {
                    bubble: h.bubble.0,
                    epoch: h.epoch,
                    site: self.site_name(h.to).to_string(),
                });
                (h.from, control::Request::Freeze { handover: id })
            }
            HandoverPhase::Frozen { .. } => return,
        };
        let order = self.send(site, Lane::Direct, request);
        if !self.track(order, Awaiting::Handover(id, h.phase)) {
            let why = format!("{}: agent not connected", h.phase.as_str());
            self.handover_failed(id, &why, h.phase.freeze_sent(), now);
        }
    }

    /// The reply to a handover's step arrived.
    pub(crate) fn handover_step(
        &mut self,
        id: HandoverId,
        phase: HandoverPhase,
        result: Result<control::Reply, Failure>,
        now: Time,
    ) {
        let Some(h) = self.handovers.get_mut(&id) else { return };
        match h.on_reply(phase, result.as_ref(), now) {
            Step::Next(_) => self.send_step(id, now),
            Step::Frozen(tick) => {
                tracing::info!(handover = id.0, bubble = h.bubble.0, tick, "source frozen");
            }
            Step::Failed { why, freeze_sent } => self.handover_failed(id, &why, freeze_sent, now),
            Step::Stale => {}
        }
    }

    /// The target runs the bubble from the seal: persist the new lease and commit.
    pub(crate) fn started(
        &mut self,
        site: SiteId,
        h: HandoverId,
        bubble: BubbleId,
        epoch: Epoch,
        now: Time,
    ) -> Result<control::Reply, Fault> {
        let Some(ho) = self.handovers.get(&h).cloned() else {
            // A retried request of a committed handover, or the start of an abandoned one.
            let committed = self.registry.get(&bubble).is_some_and(|r| r.epoch() == epoch.0);
            return if committed {
                Ok(control::Reply::Done)
            } else {
                Err(Fault::new(ErrorCode::StaleEpoch, "this handover was abandoned"))
            };
        };
        if ho.to != site || ho.bubble != bubble || ho.epoch != epoch.0 {
            return Err(Fault::new(ErrorCode::StaleEpoch, "started does not match the handover"));
        }
        if ho.given_up {
            // Too late: its lease is being left to run out and the bubble will fail over.
            return Err(Fault::new(ErrorCode::StaleEpoch, "this handover was given up"));
        }
        self.handovers.remove(&h);
        let Some(reg) = self.registry.get_mut(&bubble) else { return Ok(control::Reply::Done) };
        // The source brought the bubble back to one server for the snapshot; the new holder
        // gets its own `Parts` at the next reconciliation.
        reg.moved_to(site, epoch.0);
        self.persist_lease(bubble);
        let Some(reg) = self.registry.get(&bubble) else { return Ok(control::Reply::Done) };
        let region = Region { world: WorldId(reg.world()), bounds: Some(reg.bounds()) };
        let players: Vec<PlayerId> = reg.members().keys().copied().collect();
        self.order(ho.from, control::Request::Commit { handover: h });
        self.order(site, control::Request::Resize { lease: LeaseRef { bubble, epoch }, region });
        self.send_routes(players);
        // The snapshot lacks a player whose state was still crossing into the source (seed
        // 9505303: a transfer link cut): the site it crossed from sends it to the new holder.
        self.redirect_arrivals(bubble);
        let total = now.since(ho.started).as_secs_f64();
        let freeze = match ho.phase {
            HandoverPhase::Frozen { at } => Some(now.since(at).as_secs_f64() * 1000.0),
            _ => None,
        };
        self.stats.handover(ho.from, ho.to, HandoverOutcome::Committed, Some(total));
        let homes: Vec<SiteId> = self
            .registry
            .get(&bubble)
            .map_or_else(Vec::new, |r| r.members().values().copied().collect());
        let text = format!(
            "{} handed over {} → {} in {:.2} s{}; players' floors (plus a server tick): {}.",
            bubble.label(),
            self.cfg.sites.name(ho.from),
            self.cfg.sites.name(ho.to),
            total,
            freeze.map_or(String::new(), |ms| format!(
                ", frozen {ms:.0} ms from the core's freeze order to the target's start"
            )),
            match homes.is_empty() {
                true => "nobody in it".to_owned(),
                false => self.floors(ho.from, ho.to, &homes),
            }
        );
        self.note(now, EventKind::Handover, Some(bubble), text);
        tracing::info!(handover = h.0, bubble = bubble.0, to = %self.cfg.sites.name(site), total_ms = total * 1000.0, since_freeze_ms = freeze, "handover committed");
        self.reconcile();
        Ok(control::Reply::Done)
    }

    /// A handover that could not complete. Before the freeze the source simply continues
    /// (design.md §5): the target drops what it prepared and the bubble is re-granted to the
    /// source under a new epoch. A failed freeze is different: the source may have sealed and
    /// the seal may be on its way to the target, so abandoning now could leave the bubble with
    /// no writer or two. The core then waits for the target's `Started` until the deadline;
    /// past it the target's epoch is no longer renewed and the brain fails the bubble over.
    pub(crate) fn handover_failed(
        &mut self,
        h: HandoverId,
        why: &str,
        freeze_sent: bool,
        now: Time,
    ) {
        let Some(ho) = self.handovers.get(&h).cloned() else { return };
        if freeze_sent {
            tracing::error!(handover = h.0, bubble = ho.bubble.0, %why, "freeze unconfirmed: waiting for the target to start");
            return;
        }
        self.handovers.remove(&h);
        tracing::error!(handover = h.0, bubble = ho.bubble.0, %why, "handover abandoned before the freeze");
        let text = format!(
            "{}'s handover {} → {} abandoned before the freeze ({why}): it stays on {}.",
            ho.bubble.label(),
            self.cfg.sites.name(ho.from),
            self.cfg.sites.name(ho.to),
            self.cfg.sites.name(ho.from)
        );
        self.note(now, EventKind::Handover, Some(ho.bubble), text);
        self.stats.handover(ho.from, ho.to, HandoverOutcome::Abandoned, None);
        let abort = control::Request::Abort { handover: h, reason: why.to_owned() };
        self.order(ho.to, abort.clone());
        self.order(ho.from, abort);
        self.abandon_move(ho.bubble, ho.from, ho.epoch, now);
        self.reconcile();
    }

    /// The brain placed `bubble` at a new site under `epoch`, but the handover did not happen:
    /// put it back on `source`, which still simulates it, under a fresh epoch (`Regrant`).
    pub(crate) fn abandon_move(&mut self, bubble: BubbleId, source: SiteId, epoch: u64, now: Time) {
        let Some(reg) = self.registry.get_mut(&bubble) else { return };
        // The source brought a spread bubble back onto one server for the snapshot.
        reg.stays();
        let old = reg.lease_ref(bubble);
        let back = self.mesh.handle_move_aborted(bubble, horizon_mesh::Epoch(epoch), source, now);
        match back {
            Ok(epoch) => {
                if let Some(reg) = self.registry.get_mut(&bubble) {
                    reg.regranted(epoch.0);
                }
                self.persist_lease(bubble);
                let lease = self.lease(bubble, epoch.0, now);
                self.order(source, control::Request::Regrant { old, lease });
            }
            Err(e) => {
                // The brain has moved on (the bubble merged away or ended meanwhile): its own
                // commands end the bubble.
                tracing::warn!(bubble = bubble.0, error = %e, "abandoned move not taken back");
            }
        }
    }

    /// Handovers past their deadline: abandoned before the freeze, given up after it.
    pub(crate) fn handover_deadlines(&mut self, now: Time) {
        let overdue: Vec<(HandoverId, bool)> = self
            .handovers
            .values()
            .filter(|h| !h.given_up && h.overdue(now))
            .map(|h| (h.id, h.phase.freeze_sent()))
            .collect();
        let mut given_up = Vec::new();
        for (id, freeze_sent) in overdue {
            if !freeze_sent {
                self.handover_failed(id, "deadline passed before the freeze", false, now);
                continue;
            }
            if let Some(h) = self.handovers.get_mut(&id) {
                h.given_up = true;
                self.stats.handover(h.from, h.to, HandoverOutcome::GivenUp, None);
                given_up.push((h.bubble, h.from, h.to));
                tracing::error!(
                    handover = id.0,
                    bubble = h.bubble.0,
                    phase = h.phase.as_str(),
                    "handover not committed by its deadline: the target's lease is left to run out"
                );
            }
        }
        for (bubble, from, to) in given_up {
            let text = format!(
                "{}'s handover {} → {} not committed after the freeze by its deadline: the target's lease is left to run out, then it fails over.",
                bubble.label(),
                self.cfg.sites.name(from),
                self.cfg.sites.name(to)
            );
            self.note(now, EventKind::Fault, Some(bubble), text);
        }
    }

    /// Forgets a handover the brain has failed over (its bubble is being restored elsewhere).
    pub(crate) fn forget_handover(&mut self, bubble: BubbleId) {
        self.handovers.retain(|_, h| h.bubble != bubble);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::Tick;
    use horizon_proto::control::Reply;

    fn handover() -> Handover {
        let sites = crate::machine::tests::sites();
        let mut ids = sites.ids();
        let (from, to) = (ids.next().unwrap(), ids.next().unwrap());
        Handover {
            id: HandoverId(1),
            bubble: BubbleId(7),
            from,
            to,
            epoch: 5,
            started: Time::ZERO,
            phase: HandoverPhase::PreparingTarget,
            given_up: false,
        }
    }

    #[test]
    fn each_reply_moves_the_handover_one_phase_on() {
        let mut h = handover();
        let t = Time::from_ms(10);
        let prepared = Reply::Prepared { handover: HandoverId(1) };
        let next = h.on_reply(HandoverPhase::PreparingTarget, Ok(&prepared), t);
        assert_eq!(next, Step::Next(HandoverPhase::SendingMembers));
        let next = h.on_reply(HandoverPhase::SendingMembers, Ok(&Reply::Done), t);
        assert_eq!(next, Step::Next(HandoverPhase::PreparingSource));
        let next = h.on_reply(HandoverPhase::PreparingSource, Ok(&Reply::Done), t);
        assert_eq!(next, Step::Next(HandoverPhase::Freezing));
        let frozen = Reply::Frozen { handover: HandoverId(1), tick: Tick(42) };
        assert_eq!(h.on_reply(HandoverPhase::Freezing, Ok(&frozen), t), Step::Frozen(42));
        assert_eq!(h.phase, HandoverPhase::Frozen { at: t });
    }

    #[test]
    fn a_failure_before_the_freeze_can_be_abandoned_and_after_it_cannot() {
        let mut h = handover();
        let refused = Failure::Refused(Fault::new(ErrorCode::NotReady, "no server"));
        match h.on_reply(HandoverPhase::PreparingTarget, Err(&refused), Time::ZERO) {
            Step::Failed { freeze_sent, why } => {
                assert!(!freeze_sent);
                assert!(why.contains("preparing_target"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        let mut h = handover();
        h.phase = HandoverPhase::Freezing;
        let timeout = Failure::TimedOut { ms: 5_000 };
        match h.on_reply(HandoverPhase::Freezing, Err(&timeout), Time::ZERO) {
            Step::Failed { freeze_sent, .. } => assert!(freeze_sent),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reply_for_a_phase_already_left_changes_nothing() {
        let mut h = handover();
        h.phase = HandoverPhase::Freezing;
        let late = Failure::Gone("late".into());
        let step = h.on_reply(HandoverPhase::PreparingTarget, Err(&late), Time::ZERO);
        assert_eq!(step, Step::Stale);
        assert_eq!(h.phase, HandoverPhase::Freezing);
    }

    #[test]
    fn an_unexpected_reply_is_a_failure_of_that_step() {
        let mut h = handover();
        let step = h.on_reply(HandoverPhase::PreparingTarget, Ok(&Reply::Done), Time::ZERO);
        assert!(matches!(step, Step::Failed { freeze_sent: false, .. }), "{step:?}");
    }

    #[test]
    fn the_deadline_counts_from_the_start() {
        let h = handover();
        assert!(!h.overdue(Time::ZERO + Span::from_ms(14_999)));
        assert!(h.overdue(Time::ZERO + HANDOVER_DEADLINE));
    }
}
