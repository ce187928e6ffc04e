//! The core link: registration (full resync), reports, batched renewals, and the core's orders.

use super::*;

impl AgentMachine {
    /// The core heard this agent's `Register` on the current connection.
    pub(super) fn is_registered(&self) -> bool {
        self.registered
    }

    /// Whether the core's member lists are trusted at `now`: not for [`RESYNC_GRACE`] after a
    /// registration, as orders may overtake its answer (a restarted core learns the members
    /// from each home's `Players`).
    pub(super) fn trusting_members(&self, now: Instant) -> bool {
        self.registered_at.is_none_or(|t| now >= t + RESYNC_GRACE)
    }

    /// The core connection ended: the ordered lane's orders are dropped (the core resends what
    /// matters at the next registration).
    pub(super) fn core_lost(&mut self) {
        self.registered = false;
        self.drop_lane("the core connection ended");
    }

    pub(super) fn register(&mut self, now: Instant) {
        // Orders may overtake the answer: the core's member lists are not trusted from now.
        self.registered_at = Some(now);
        // Every bubble a server here may still write: running, or the source of a handover
        // not frozen yet. (Left out, the core would take it as gone and restore or drain it
        // elsewhere while it still ticks here: two writers, seed 9013801.)
        let held = self
            .bubbles
            .values()
            .filter(|b| matches!(b.phase(), Phase::Running | Phase::Leaving { .. }))
            .map(|b| control::Held { lease: b.lease_ref(), tick: Tick(0) })
            .collect();
        let register = control::Request::Register {
            site: self.cfg.site.clone(),
            build: name(env!("CARGO_PKG_VERSION")),
            transfer_addr: self.cfg.advertise_transfer.clone(),
            servers: self.server_loads(),
            held,
        };
        self.ask_core(Then::Registered, register);
    }

    /// Every server's load. The servers of a bubble spread over several are listed in part
    /// order (the core reads each part's tick rate from that order): servers sort by the
    /// spread bubble they hold a part of (the lowest id when several share the server; other
    /// regions — zones, bubbles on one server — do not decide) and that part's index.
    pub(super) fn server_loads(&self) -> Vec<control::ServerLoad> {
        let part = |name: &Name, bubbles: &[BubbleId]| {
            let spread = bubbles
                .iter()
                .filter_map(|b| self.bubbles.get(b).map(|l| (b, l)))
                .filter(|(_, l)| l.servers().count() > 1)
                .min_by_key(|(b, _)| **b);
            match spread {
                Some((b, l)) => (Some(b.0), l.servers().position(|s| s == name)),
                None => (bubbles.first().map(|b| b.0), None),
            }
        };
        let mut loads: Vec<_> = self
            .fleet
            .iter()
            .map(|(n, s)| {
                let (tps, players) = s.load();
                let load = control::ServerLoad {
                    server: n.clone(),
                    tps,
                    players,
                    chunks_loading: 0,
                    ready: self.takes_regions(n, s),
                    bubbles: s.regions().to_vec(),
                };
                (part(n, s.regions()), load)
            })
            .collect();
        loads.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.server.cmp(&b.1.server)));
        loads.into_iter().map(|(_, l)| l).collect()
    }

    /// The answer to a request this machine sent the core.
    pub(super) fn core_replied(
        &mut self,
        then: Then,
        result: Result<control::Reply, Failure>,
        now: Instant,
    ) {
        match (then, result) {
            (Then::Registered, Ok(reply)) => self.registered(reply, now),
            (Then::Registered, Err(e)) => {
                tracing::warn!(error = %e, "registration failed; retried at reconnection")
            }
            (Then::Renewed { sent }, Ok(reply)) => self.renewed(sent, reply, now),
            (Then::PlayerIds, reply) => self.ids_granted(reply),
            (Then::Rehome { bubble, awaited }, result) => {
                self.rehome_answered(bubble, awaited, result.map(|_| ()), now)
            }
            (Then::Nothing(what), Err(e)) => {
                tracing::warn!(error = %e, what, "request to the core failed")
            }
            (then, Err(e)) => tracing::warn!(error = %e, ?then, "request to the core failed"),
            (_, Ok(_)) => {}
        }
    }

    fn registered(&mut self, reply: control::Reply, now: Instant) {
        let control::Reply::Registered { keep, stop, peers, generation, homed, .. } = reply else {
            tracing::warn!(?reply, "unexpected reply to register");
            return;
        };
        self.registered = true;
        tracing::info!(site = %self.cfg.site, generation, peers = peers.len(), "registered with the core");
        // Each names the epoch this agent said it held: a bubble restored or regranted here
        // under a newer one since (its order came before this answer) is left alone (seed
        // 201286: a restored bubble dropped by its id).
        for lease in keep {
            if let Some(b) = self.bubbles.get_mut(&lease.bubble)
                && b.lease().epoch == lease.epoch
            {
                b.kept(lease);
            }
        }
        for lref in stop {
            if self.bubbles.get(&lref.bubble).is_some_and(|b| b.lease().epoch == lref.epoch) {
                self.drop_bubble(lref.bubble);
            }
        }
        self.adopt_peers(peers);
        self.ask_ids();
        // Players this agent knew nothing of (it just started) are kept for their clients to
        // resume; they are in the resync below, so the core keeps them too.
        self.adopt_homed(homed, now);
        // Full resync of this site's players: a restarted core puts them back where they play.
        let players = self.placed_players();
        // A restarted core has no probe table: each is sent again with the next report.
        let measured = self.measured_players();
        self.outbox.resync(measured);
        self.ask_core(
            Then::Nothing("player resync (sent again at the next registration)"),
            control::Request::Players { players },
        );
        if let Some(addr) = self.cfg.advertise_admin.clone() {
            self.ask_core(Then::Nothing("admin address"), control::Request::Admin { addr });
        }
        let bound = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let pool = control::Request::Pool {
            warm: bound(self.cfg.warm_pool),
            max: bound(self.cfg.max_servers),
        };
        self.ask_core(Then::Nothing("pool bounds"), pool);
    }

    /// Dials the sites this agent must dial (one connection per pair: the site whose name
    /// sorts first dials), at the configured address if any, else the one the core gave.
    pub(super) fn adopt_peers(&mut self, peers: Vec<control::Peer>) {
        for peer in peers {
            if self.cfg.site.as_str() > peer.site.as_str() || self.dialed.contains(&peer.site) {
                continue;
            }
            let addr = self
                .cfg
                .peers
                .get(peer.site.as_str())
                .cloned()
                .or_else(|| horizon_types::Target::parse(&peer.transfer_addr).ok());
            match addr {
                Some(addr) => {
                    self.dialed.insert(peer.site.clone());
                    self.effects.push_back(Effect::DialPeer { site: peer.site, addr });
                }
                None => {
                    tracing::warn!(peer = %peer.site, addr = %peer.transfer_addr, "peer address unusable")
                }
            }
        }
    }

    pub(super) fn report(&mut self, now: Instant) {
        if !self.registered {
            return;
        }
        let players = self.player_samples();
        let backbone = self.backbone_samples(now);
        let (joins, leaves) = self.outbox.take_changes();
        let report = control::Request::Report {
            joins,
            leaves,
            players,
            backbone,
            servers: self.server_loads(),
        };
        self.ask_core(Then::Nothing("report"), report);
        self.report_measured();
        self.report_positions();
    }

    /// The believed probe tables of players who joined since the last report (or of every
    /// player, after a registration), in requests of at most `MAX_MEASURED` players. Players
    /// gone since are left out.
    fn report_measured(&mut self) {
        let players: Vec<control::MeasuredPlayer> =
            self.outbox.take_measured().into_iter().filter_map(|id| self.measured(id)).collect();
        for chunk in players.chunks(control::MAX_MEASURED) {
            let request = control::Request::Measured { players: chunk.to_vec() };
            self.ask_core(Then::Nothing("probe tables"), request);
        }
    }

    /// Where this site's game servers put their players since the last report (the only
    /// positions placement uses), in requests of at most `MAX_POSITIONS` players. A region
    /// that ended since is left out.
    fn report_positions(&mut self) {
        let mut batch: Vec<control::RegionPositions> = Vec::new();
        let mut in_batch = 0;
        for ((bubble, _), region) in self.outbox.take_positions() {
            if self.bubbles.get(&bubble).is_none_or(|b| b.lease().epoch != region.lease.epoch) {
                continue;
            }
            if in_batch + region.players.len() > server::MAX_POSITIONS && !batch.is_empty() {
                let regions = std::mem::take(&mut batch);
                self.ask_core(Then::Nothing("positions"), control::Request::Positions { regions });
                in_batch = 0;
            }
            in_batch += region.players.len();
            batch.push(region);
        }
        if !batch.is_empty() {
            self.ask_core(
                Then::Nothing("positions"),
                control::Request::Positions { regions: batch },
            );
        }
    }

    /// The players who joined (and left) since the last report, at once: the core gives a
    /// player alone at their spawn a bubble as soon as it hears of them. With the servers'
    /// loads (the core's capacity figures), without the other players' samples.
    pub(super) fn report_joins(&mut self) {
        if !self.registered || !self.outbox.has_joins() {
            return;
        }
        let (joins, leaves) = self.outbox.take_changes();
        let report = control::Request::Report {
            joins,
            leaves,
            players: Vec::new(),
            backbone: Vec::new(),
            servers: self.server_loads(),
        };
        self.ask_core(Then::Nothing("report"), report);
        self.report_measured();
    }

    /// One batched renewal for every lease this site runs or stands by for. A handover source
    /// is left out: its epoch is superseded, and it stops at the freeze well within its lease.
    pub(super) fn renew(&mut self, now: Instant) {
        if !self.registered {
            return;
        }
        let leases: Vec<LeaseRef> = self
            .bubbles
            .values()
            .filter(|b| !matches!(b.phase(), Phase::Leaving { .. } | Phase::Sealed { .. }))
            .filter(|b| b.refused_at().is_none())
            .map(Local::lease_ref)
            .collect();
        if leases.is_empty() {
            return;
        }
        self.ask_core(Then::Renewed { sent: now }, control::Request::Renew { leases });
    }

    fn renewed(&mut self, sent: Instant, reply: control::Reply, now: Instant) {
        let control::Reply::Renewed { ttl_ms, granted, refused } = reply else { return };
        let sent_ago_ms =
            now.saturating_duration_since(sent).as_millis().min(u128::from(u32::MAX)) as u32;
        let mut per_server: BTreeMap<Name, Vec<LeaseRef>> = BTreeMap::new();
        let until = sent + Duration::from_millis(u64::from(ttl_ms));
        for l in granted {
            if let Some(b) = self.bubbles.get_mut(&l.bubble).filter(|b| b.lease().epoch == l.epoch)
            {
                b.renewed(until);
                for server in b.servers() {
                    per_server.entry(server.clone()).or_default().push(l);
                }
            }
        }
        let mut per_server: Vec<_> = per_server.into_iter().collect();
        per_server.sort_by(|a, b| a.0.cmp(&b.0));
        for (server, leases) in per_server {
            let req = server::Request::Renew { leases, ttl_ms, sent_ago_ms };
            self.ask_server(&server, Then::Nothing("renewal"), req);
        }
        for l in refused {
            // Refused: the core's view of the lease ran out, so its servers (counting from an
            // earlier send) have stopped by their clocks. Their players' states stay a while
            // for the departures the core may order.
            if let Some(b) = self.bubbles.get_mut(&l.bubble).filter(|b| b.lease().epoch == l.epoch)
                && b.refused(now)
            {
                tracing::warn!(bubble = l.bubble.0, epoch = l.epoch.0, "renewal refused: stopped");
            }
        }
    }

    /// One order of the core, received at `received` (earlier than now if it waited for a
    /// server: leases it grants count from then).
    /// Numbered orders of the ordered lane are served in their order (see `lane`).
    pub(super) fn core_order(&mut self, token: Token, order: control::Request, received: Instant) {
        match order {
            control::Request::InOrder { lane, seq, order } => {
                self.in_order(token, lane, seq, *order, received)
            }
            order => self.serve_order(Waiting { received, token, order }, received),
        }
    }

    pub(super) fn serve_order(&mut self, w: Waiting, now: Instant) {
        use control::Request as R;
        if self.servers_needed(&w.order) > self.free_servers() {
            self.wait_for_server(w, now);
            return;
        }
        let Waiting { received, token, order } = w;
        let result = match order {
            R::Create { bubble, region, lease } => {
                if self.bubbles.get(&bubble).is_some_and(|b| b.lease().epoch == lease.epoch) {
                    Ok(control::Reply::Done)
                } else {
                    let lease = Lease { bubble, ..lease };
                    let job = AssignJob::Create { token, region, lease, received };
                    // Its members follow in a `Members` order.
                    match self.assign(lease, region, 1, false, job, received, now) {
                        Ok(()) => return,
                        Err(fault) => Err(fault),
                    }
                }
            }
            R::Restore { lease, region, from, tick, copy } => {
                let copy = BackupCopy { from, tick, copy, parts: Vec::new() };
                match self.restore(token, lease, region, copy, received, now) {
                    Ok(()) => return,
                    Err(fault) => Err(fault),
                }
            }
            R::RestoreParts { lease, region, from, tick, copy, parts } => {
                let copy = BackupCopy { from, tick, copy, parts };
                match self.restore(token, lease, region, copy, received, now) {
                    Ok(()) => return,
                    Err(fault) => Err(fault),
                }
            }
            R::Covered { players } => {
                self.covered(&players);
                Ok(control::Reply::Done)
            }
            R::Resize { lease, region } => self.resize(lease, region),
            R::Members { lease, players, departed } => self.members(lease, players, departed, now),
            R::Route { routes } => {
                self.route(routes, now);
                Ok(control::Reply::Done)
            }
            R::Adopt { lease, players, copy } => self.adopt(lease, players, copy),
            R::Recover { routes } => {
                self.recover(routes, now);
                Ok(control::Reply::Done)
            }
            R::Peers { peers } => {
                self.adopt_peers(peers);
                Ok(control::Reply::Done)
            }
            R::Carve { lease, holes } => self.carve(lease, holes),
            R::Links { links } => {
                self.adopt_links(links, now);
                Ok(control::Reply::Done)
            }
            R::Prepare { handover, bubble, source, target, lease, .. } => {
                if target == self.cfg.site {
                    match self.prepare_target(token, handover, bubble, source, lease, now) {
                        Ok(true) => return,
                        Ok(false) => Ok(control::Reply::Prepared { handover }),
                        Err(fault) => Err(fault),
                    }
                } else if source == self.cfg.site {
                    // The snapshot comes from one server: a spread bubble comes back onto it
                    // first.
                    let then =
                        parts::AfterRegroup::PrepareSource { token, handover, target, lease };
                    match self.consolidate(bubble, then, now) {
                        Ok(()) => return,
                        Err(fault) => Err(fault),
                    }
                } else {
                    Err(Fault::new(ErrorCode::Unexpected, "prepare for a handover of other sites"))
                }
            }
            R::Freeze { handover } => match self.freeze(token, handover) {
                Ok(()) => return,
                Err(fault) => Err(fault),
            },
            R::Commit { handover } => {
                let bubble = self.bubble_in(|p| {
                    p == Phase::Leaving { handover } || p == Phase::Sealed { handover }
                });
                if let Some(bubble) = bubble {
                    self.drop_bubble(bubble);
                }
                Ok(control::Reply::Done)
            }
            R::Abort { handover, reason } => {
                self.abort(handover, &reason);
                Ok(control::Reply::Done)
            }
            R::Regrant { old, lease } => match self.regrant(token, old, lease, received, now) {
                Ok(()) => return,
                Err(fault) => Err(fault),
            },
            R::Parts { lease, parts, players } => {
                match self.spread(token, lease, parts, players, now) {
                    Ok(()) => return,
                    Err(fault) => Err(fault),
                }
            }
            R::Revoke { leases } => {
                if self.revoke(token, leases) {
                    // Answered once its servers have let go (`bubbles.rs::released`).
                    return;
                }
                Ok(control::Reply::Done)
            }
            R::Register { .. }
            | R::Report { .. }
            | R::Renew { .. }
            | R::Started { .. }
            | R::Lost { .. }
            | R::Players { .. }
            | R::PlayerIds { .. }
            | R::Admin { .. }
            | R::Positions { .. }
            | R::Measured { .. }
            | R::Pool { .. }
            | R::Rehome { .. }
            | R::Failed { .. } => {
                Err(Fault::new(ErrorCode::Unexpected, "an agent request, sent by the core"))
            }
            R::InOrder { .. } => {
                Err(Fault::new(ErrorCode::Malformed, "an InOrder order inside an InOrder"))
            }
        };
        self.answer(token, result);
    }

    /// How many ready servers an order takes.
    pub(super) fn servers_needed(&self, body: &control::Request) -> usize {
        use control::Request as R;
        match body {
            R::Create { bubble, .. } => usize::from(!self.bubbles.contains(bubble)),
            R::Restore { lease, .. } | R::RestoreParts { lease, .. } => usize::from(
                self.bubbles.get(&lease.bubble).is_none_or(|b| b.lease().epoch != lease.epoch),
            ),
            R::Prepare { target, .. } => usize::from(target == &self.cfg.site),
            // Nothing for a bubble not held here or a cut beyond the limit: refused at once.
            R::Parts { lease, parts, .. } => match self.bubbles.get(&lease.bubble) {
                Some(b) if parts.len() <= MAX_PARTS => {
                    parts.len().saturating_sub(1 + b.extra().len())
                }
                _ => 0,
            },
            _ => 0,
        }
    }
}
