//! The core's ordered lane as this agent serves it: the core sends its orders to this site
//! numbered (`control::Request::InOrder`) without waiting for each answer, and they are served
//! here one at a time, in their order, each once the one before is answered. Orders that come
//! ahead of their turn (QUIC delivers separate streams in any order) wait for it.

use super::*;

/// How long the order being served holds the next ones back: the time the core waits for an
/// answer (the transport's request timeout). An order still unanswered by then (a server that
/// never loads) lets the next ones go, as the core would have sent them after its timeout.
const HEAD_WAIT: Duration = Duration::from_secs(5);

/// The lane's state. Bounded: at most [`control::MAX_IN_ORDER`] orders are kept.
#[derive(Default)]
pub(super) struct OrderLane {
    /// The lane served (one per core connection), and the `seq` it serves next.
    lane: Option<u64>,
    next: u64,
    /// Orders that came ahead of their turn, by `seq`.
    early: BTreeMap<u64, Waiting>,
    /// Orders whose turn came, not served yet.
    ready: VecDeque<Waiting>,
    /// The order being served (its token and kind), and since when.
    serving: Option<(Token, &'static str, Instant)>,
}

impl AgentMachine {
    /// One numbered order of the core's ordered lane `lane`.
    pub(super) fn in_order(
        &mut self,
        token: Token,
        lane: u64,
        seq: u64,
        order: control::Request,
        received: Instant,
    ) {
        if self.lane.lane != Some(lane) {
            // A new connection of the core: what the old one sent and was not served yet
            // is dropped with it (the core learnt those orders failed when it closed).
            self.drop_lane("a new lane replaced it");
            self.lane.lane = Some(lane);
        }
        let next = self.lane.next;
        // The first order not served yet: the lane keeps at most MAX_IN_ORDER from it on.
        let first = next - self.lane.ready.len() as u64;
        let refused = if seq < next || self.lane.early.contains_key(&seq) {
            Some(Fault::new(ErrorCode::Conflict, format!("order {seq} of this lane came twice")))
        } else if seq - first >= control::MAX_IN_ORDER {
            let max = control::MAX_IN_ORDER;
            let why = format!("order {seq} is {max} or more ahead of {first}, the next to serve");
            Some(Fault::new(ErrorCode::Busy, why))
        } else {
            None
        };
        if let Some(fault) = refused {
            self.stats.orders_refused.fetch_add(1, Ordering::Relaxed);
            return self.answer(token, Err(fault));
        }
        self.lane.early.insert(seq, Waiting { received, token, order });
        while let Some(w) = self.lane.early.remove(&self.lane.next) {
            self.lane.ready.push_back(w);
            self.lane.next += 1;
        }
    }

    /// Serves the lane's next orders while none is being served. Runs after every input.
    pub(super) fn serve_lane(&mut self, now: Instant) {
        while self.lane.serving.is_none() {
            let Some(w) = self.lane.ready.pop_front() else { return };
            let kind = horizon_proto::Message::kind(&w.order);
            self.lane.serving = Some((w.token, kind, now));
            self.serve_order(w, now);
        }
    }

    /// `token` was answered: if the lane was waiting on it, its next order may go.
    pub(super) fn lane_answered(&mut self, token: Token) {
        if self.lane.serving.is_some_and(|(t, ..)| t == token) {
            self.lane.serving = None;
        }
    }

    /// An order served for longer than [`HEAD_WAIT`] lets the next ones go.
    pub(super) fn lane_housekeeping(&mut self, now: Instant) {
        if let Some((_, order, since)) = self.lane.serving
            && now >= since + HEAD_WAIT
        {
            tracing::warn!(site = %self.cfg.site, order, "an order unanswered for 5 s: the next ones go");
            self.stats.orders_overtaken.fetch_add(1, Ordering::Relaxed);
            self.lane.serving = None;
        }
    }

    /// The core connection ended: its orders not served yet are dropped (refused, for the
    /// shell to free them), and the next connection starts a lane of its own.
    pub(super) fn drop_lane(&mut self, why: &str) {
        let lane = std::mem::take(&mut self.lane);
        let dropped = lane.early.into_values().chain(lane.ready);
        for w in dropped {
            self.answer(w.token, Err(Fault::new(ErrorCode::NotReady, why)));
        }
    }
}
