//! The bubbles this site runs: creation, restore, members, crossings, handovers (source and target), parts, regrant, release.

use super::*;

impl Agent {
    pub(super) fn free_servers(&self) -> usize {
        self.servers.values().filter(|s| s.ready && s.bubbles.is_empty()).count()
    }

    pub(super) fn bubble_in(&self, pred: impl Fn(Phase) -> bool) -> Option<BubbleId> {
        self.bubbles.iter().find(|(_, b)| pred(b.phase)).map(|(&id, _)| id)
    }

    /// A ready server holding nothing, if any.
    pub(super) fn free_server(&self) -> Option<Name> {
        let mut free: Vec<&Name> = self
            .servers
            .iter()
            .filter(|(_, s)| s.ready && s.bubbles.is_empty())
            .map(|(n, _)| n)
            .collect();
        free.sort();
        free.first().map(|n| (*n).clone())
    }

    pub(super) async fn assign(
        &mut self,
        lease: Lease,
        region: Region,
        standby: bool,
    ) -> Result<Name, Fault> {
        let server = self.free_server().ok_or_else(|| {
            Fault::new(ErrorCode::NotReady, format!("no ready server at {}", self.site))
        })?;
        let conn = self.servers[&server].conn.clone();
        let reply = conn
            .request(&server::Request::Assign { lease, region, from_snapshot: standby })
            .await
            .map_err(|e| Fault::new(ErrorCode::NotReady, format!("server {server}: {e}")))?;
        if let server::Reply::Stale { newest } = reply {
            return Err(Fault::new(
                ErrorCode::StaleEpoch,
                format!("server has epoch {}", newest.0),
            ));
        }
        if let Some(s) = self.servers.get_mut(&server) {
            s.bubbles.push(lease.bubble);
        }
        self.top_up_pool();
        Ok(server)
    }

    pub(super) async fn create(
        &mut self,
        bubble: BubbleId,
        region: Region,
        lease: Lease,
        received: Instant,
    ) -> Result<control::Reply, Fault> {
        if self.bubbles.get(&bubble).is_some_and(|b| b.lease.epoch == lease.epoch) {
            return Ok(control::Reply::Done);
        }
        let lease = remaining(lease, received);
        let server = self.assign(lease, region, false).await?;
        tracing::info!(site = %self.site, bubble = bubble.0, epoch = lease.epoch.0, %server, "bubble created");
        self.bubbles.insert(bubble, Local::new(lease, region, server, Phase::Running, received));
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        Ok(control::Reply::Done)
    }

    /// A failover: run `lease.bubble` here from its latest copy (SPEC section 6). The server
    /// stands by under the new epoch, takes the copy as a snapshot of the older epoch `from`
    /// and a seal at `tick` (no final delta), and runs from `tick + 1`. Returns the bubble when
    /// the answer waits for the server's first update; `None` when it already runs here.
    pub(super) async fn restore(
        &mut self,
        lease: Lease,
        region: Region,
        from: Epoch,
        tick: Tick,
        copy: &Blob,
        received: Instant,
    ) -> Result<Option<BubbleId>, Fault> {
        let bubble = lease.bubble;
        match self.bubbles.get(&bubble) {
            Some(b) if b.lease.epoch == lease.epoch => return Ok(None),
            Some(b) if b.lease.epoch > lease.epoch => {
                return Err(Fault::new(ErrorCode::StaleEpoch, "a newer epoch runs here"));
            }
            // An older holder here (a stalled copy of this very bubble): it stops for good.
            Some(_) => self.drop_bubble(bubble).await,
            None => {}
        }
        let lease = remaining(lease, received);
        let empty = copy.0.is_empty();
        let server = self.assign(lease, region, !empty).await?;
        tracing::warn!(site = %self.site, bubble = bubble.0, epoch = lease.epoch.0, tick = tick.0, copy_bytes = copy.0.len(), %server, "restoring a bubble from its copy");
        let phase = if empty { Phase::Running } else { Phase::Restoring };
        self.bubbles.insert(bubble, Local::new(lease, region, server.clone(), phase, received));
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        if empty {
            return Ok(None);
        }
        let Some(out) = self.servers.get(&server).map(|s| s.out.clone()) else {
            return Err(Fault::new(ErrorCode::NotReady, format!("server {server} is gone")));
        };
        let chunks: Vec<&[u8]> = copy.0.chunks(RESTORE_CHUNK).collect();
        let total = chunks.len() as u32;
        let mut items: Vec<StateItem> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| {
                StateItem::Snapshot(horizon_proto::Snapshot {
                    bubble,
                    epoch: from,
                    tick,
                    index: i as u32,
                    total,
                    bytes: Blob(bytes.to_vec()),
                })
            })
            .collect();
        items.push(StateItem::Seal(horizon_proto::Seal {
            bubble,
            epoch: from,
            tick,
            final_delta: Blob::default(),
            last_applied: Vec::new(),
        }));
        // The server's stream queue holds far more than one copy's chunks; a full one means
        // the server is stuck, and the deadline refuses the restore.
        tokio::spawn(async move {
            for item in items {
                if out.send(item).await.is_err() {
                    return;
                }
            }
        });
        Ok(Some(bubble))
    }

    /// The core stored copies that include these players' inputs up to `seq`.
    pub(super) fn covered(&mut self, players: &[control::CoveredInput]) {
        for c in players {
            if let Some(gw) = self.players.get_mut(&c.player) {
                gw.session.covered(c.seq);
            }
        }
    }

    pub(super) async fn resize(
        &mut self,
        lease: LeaseRef,
        region: Region,
    ) -> Result<control::Reply, Fault> {
        let b = self.bubbles.get_mut(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        b.region = region;
        let lease = LeaseRef { bubble: lease.bubble, epoch: b.lease.epoch };
        if !b.extra.is_empty() {
            // Spread: the parts' boxes follow in the next `Parts`.
            return Ok(control::Reply::Done);
        }
        if let Some(srv) = self.servers.get(&b.server) {
            let conn = srv.conn.clone();
            tokio::spawn(async move {
                let _ = conn.request(&server::Request::Resize { lease, region }).await;
            });
        }
        Ok(control::Reply::Done)
    }

    /// The core's full member list of a bubble: join the new, release the departed.
    pub(super) async fn members(
        &mut self,
        lease: LeaseRef,
        players: Vec<control::Member>,
        departed: Vec<control::Departure>,
    ) -> Result<control::Reply, Fault> {
        let b = self.bubbles.get_mut(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        let held = LeaseRef { bubble: lease.bubble, epoch: b.lease.epoch };
        let standby = matches!(b.phase, Phase::Standby { .. });
        let server = b.server.clone();
        let old: HashMap<PlayerId, Name> = std::mem::take(&mut b.members);
        b.members = players.iter().map(|m| (m.player, m.home.clone())).collect();
        if standby {
            // The snapshot holds the players; the list only says where their updates go.
            return Ok(control::Reply::Done);
        }
        let Some(conn) = self.servers.get(&server).map(|s| s.conn.clone()) else {
            return Err(Fault::new(ErrorCode::NotReady, format!("server {server} is gone")));
        };
        for m in players.iter().filter(|m| !old.contains_key(&m.player)) {
            if m.crossing {
                match self.crossings.remove(&m.player).filter(|c| c.to == lease.bubble) {
                    Some(c) => self.join(&conn, held, m.player, c.last_applied, c.state).await,
                    None => {
                        self.awaiting.insert(m.player, lease.bubble);
                    }
                }
            } else {
                self.join(&conn, held, m.player, Seq(0), Blob::default()).await;
            }
        }
        let departed: HashMap<PlayerId, control::Departure> =
            departed.into_iter().map(|d| (d.player, d)).collect();
        for player in old.keys().filter(|p| !players.iter().any(|m| m.player == **p)) {
            let holder = match self.bubbles.get_mut(&lease.bubble) {
                Some(b) => b.holder.remove(player),
                None => None,
            };
            let conn = holder.and_then(|h| self.server_conn(&h)).unwrap_or_else(|| conn.clone());
            let left = conn.request(&server::Request::Leave { lease: held, player: *player }).await;
            let Ok(server::Reply::Left { last_applied, state }) = left else { continue };
            if let Some(d) = departed.get(player) {
                self.cross(*player, lease.bubble, d.clone(), last_applied, state);
            }
        }
        Ok(control::Reply::Done)
    }

    pub(super) async fn join(
        &mut self,
        conn: &Conn<Server>,
        lease: LeaseRef,
        player: PlayerId,
        last_applied: Seq,
        state: Blob,
    ) {
        let req = server::Request::Join { lease, player, last_applied, state };
        if let Err(e) = conn.request(&req).await {
            tracing::warn!(player = player.0, error = %e, "join refused by the server");
        }
    }

    /// Sends a departed player's state to the site that simulates them now.
    pub(super) fn cross(
        &mut self,
        player: PlayerId,
        from: BubbleId,
        d: control::Departure,
        last_applied: Seq,
        state: Blob,
    ) {
        self.stats.crossings.fetch_add(1, Ordering::Relaxed);
        let req = transfer::Request::Cross {
            player,
            from,
            to: d.to.bubble,
            epoch: d.to.epoch,
            last_applied,
            state,
        };
        if d.site == self.site {
            let events = self.events.clone();
            tokio::spawn(async move {
                let _ = events.send(Event::LocalCross(req)).await;
            });
            return;
        }
        let Some(peer) = self.peers.get(&d.site) else {
            tracing::warn!(player = player.0, site = %d.site, "no link to carry a crossing");
            return;
        };
        let conn = peer.conn.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.request(&req).await {
                tracing::warn!(player = player.0, error = %e, "crossing lost");
            }
        });
    }

    pub(super) fn route(&mut self, routes: Vec<control::PlayerRoute>) {
        for r in routes {
            let Some(gw) = self.players.get_mut(&r.player) else { continue };
            if gw.session.set_route(r.bubble, r.site) {
                // Every input kept goes to the new holder, which applies each (player, seq)
                // once.
                self.resend(r.player, true);
            }
        }
    }

    pub(super) async fn prepare_target(
        &mut self,
        handover: HandoverId,
        bubble: BubbleId,
        source: Name,
        lease: Lease,
    ) -> Result<control::Reply, Fault> {
        if self.bubbles.get(&bubble).is_some_and(|b| b.phase == Phase::Standby { handover }) {
            return Ok(control::Reply::Prepared { handover });
        }
        let region = Region { world: WorldId(0), bounds: None };
        let server = self.assign(lease, region, true).await?;
        tracing::info!(site = %self.site, bubble = bubble.0, from = %source, %server, "handover target standing by");
        let local = Local::new(lease, region, server, Phase::Standby { handover }, Instant::now());
        self.bubbles.insert(bubble, local);
        self.stats.handovers_in.fetch_add(1, Ordering::Relaxed);
        Ok(control::Reply::Prepared { handover })
    }

    pub(super) fn prepare_source(
        &mut self,
        handover: HandoverId,
        bubble: BubbleId,
        target: Name,
        lease: Lease,
        req: InboundRequest<Control>,
    ) {
        if self.bubbles.get(&bubble).is_none_or(|b| b.lease.epoch != lease.epoch) {
            tokio::spawn(req.reply(Err(unknown(bubble))));
            return;
        }
        // The state goes over this site's one transfer connection to the target (the core's
        // `target_addr` is what a fresh link would dial; the link exists once both registered).
        let Some(peer) = self.peers.get(&target) else {
            let fault = Fault::new(ErrorCode::NotReady, format!("no transfer link to {target}"));
            tokio::spawn(req.reply(Err(fault)));
            return;
        };
        self.pending_prepare.insert(handover, req);
        let conn = peer.conn.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let open = transfer::Request::Open { handover, bubble, epoch: lease.epoch };
            let stream = match conn.request(&open).await {
                Ok(transfer::Reply::Accepted { .. }) => match conn.open_stream().await {
                    Ok(sender) => Ok(stream_task(sender)),
                    Err(e) => Err(e.to_string()),
                },
                Ok(other) => Err(format!("unexpected reply {other:?}")),
                Err(e) => Err(e.to_string()),
            };
            let _ = events.send(Event::Task(Done::SourceOpened { handover, bubble, stream })).await;
        });
    }

    pub(super) async fn source_opened(
        &mut self,
        handover: HandoverId,
        bubble: BubbleId,
        stream: Result<mpsc::Sender<StateItem>, String>,
    ) {
        let Some(req) = self.pending_prepare.remove(&handover) else { return };
        let result = match (stream, self.bubbles.get_mut(&bubble)) {
            (Ok(tx), Some(local)) => {
                local.phase = Phase::Leaving { handover };
                let lease = LeaseRef { bubble, epoch: local.lease.epoch };
                let conn = self.servers.get(&local.server).map(|s| s.conn.clone());
                self.mirrors.insert(bubble, (handover, tx));
                match conn {
                    Some(conn) => match conn
                        .request(&server::Request::Copy { lease, deltas: true })
                        .await
                    {
                        Ok(_) => Ok(control::Reply::Done),
                        Err(e) => Err(Fault::new(ErrorCode::NotReady, format!("snapshot: {e}"))),
                    },
                    None => Err(Fault::new(ErrorCode::NotReady, "the bubble's server is gone")),
                }
            }
            (Err(e), _) => Err(Fault::new(ErrorCode::NotReady, format!("transfer to target: {e}"))),
            (_, None) => Err(unknown(bubble)),
        };
        if result.is_err() {
            self.mirrors.remove(&bubble);
            if let Some(local) = self.bubbles.get_mut(&bubble) {
                local.phase = Phase::Running;
            }
        }
        let _ = req.reply(result).await;
    }

    /// Spreads a bubble over `parts.len()` servers of this site, or back onto fewer, and puts
    /// each member on their part's server (SPEC section 4, within a site).
    pub(super) async fn spread(
        &mut self,
        lease: LeaseRef,
        parts: Vec<Aabb>,
        players: Vec<control::PartMember>,
    ) -> Result<control::Reply, Fault> {
        if parts.is_empty() || parts.len() > MAX_PARTS {
            let why = format!("a bubble has 1 to {MAX_PARTS} parts, not {}", parts.len());
            return Err(Fault::new(ErrorCode::Unexpected, why));
        }
        let local = self
            .bubbles
            .get(&lease.bubble)
            .filter(|b| b.lease.epoch == lease.epoch)
            .ok_or_else(|| unknown(lease.bubble))?;
        if local.phase != Phase::Running {
            return Err(Fault::new(ErrorCode::Conflict, "parts of a bubble not running here"));
        }
        let world = local.region.world;
        let regions: Vec<Region> = if parts.len() == 1 {
            vec![local.region]
        } else {
            parts.iter().map(|&b| Region { world, bounds: Some(b) }).collect()
        };
        let place: HashMap<PlayerId, usize> =
            players.iter().map(|m| (m.player, (m.part as usize).min(parts.len() - 1))).collect();
        self.regroup(lease.bubble, regions, &place).await?;
        tracing::debug!(site = %self.site, bubble = lease.bubble.0, parts = parts.len(), "bubble spread");
        Ok(control::Reply::Done)
    }

    /// Every player of a spread bubble back on its first server, the others released.
    pub(super) async fn consolidate(&mut self, bubble: BubbleId) -> Result<(), Fault> {
        let Some(local) = self.bubbles.get(&bubble).filter(|b| !b.extra.is_empty()) else {
            return Ok(());
        };
        let region = local.region;
        let place = local.members.keys().map(|&p| (p, 0)).collect();
        self.regroup(bubble, vec![region], &place).await
    }

    /// One server per region (keeping the current ones in order, taking ready ones for new
    /// parts, releasing the surplus), each member moved to the server of its part: `place`,
    /// else the part it is in when that part remains, else the first.
    pub(super) async fn regroup(
        &mut self,
        bubble: BubbleId,
        regions: Vec<Region>,
        place: &HashMap<PlayerId, usize>,
    ) -> Result<(), Fault> {
        let local = self.bubbles.get(&bubble).ok_or_else(|| unknown(bubble))?;
        let full = local.lease;
        let lease = LeaseRef { bubble, epoch: full.epoch };
        let mut servers: Vec<Name> = local.servers().cloned().collect();
        while servers.len() < regions.len() {
            let server = self.assign(full, regions[servers.len()], false).await?;
            servers.push(server);
        }
        let local = self.bubbles.get(&bubble).ok_or_else(|| unknown(bubble))?;
        let moves: Vec<(PlayerId, Name, Name)> = local
            .members
            .keys()
            .filter_map(|&p| {
                let from = local.server_of(p).clone();
                let now = servers.iter().position(|s| *s == from).filter(|&i| i < regions.len());
                let part = place.get(&p).copied().or(now).unwrap_or(0);
                let to = servers[part].clone();
                (to != from).then_some((p, from, to))
            })
            .collect();
        for (player, from, to) in moves {
            let (Some(a), Some(b)) = (self.server_conn(&from), self.server_conn(&to)) else {
                continue;
            };
            match a.request(&server::Request::Leave { lease, player }).await {
                Ok(server::Reply::Left { last_applied, state }) => {
                    self.join(&b, lease, player, last_applied, state).await;
                    if let Some(local) = self.bubbles.get_mut(&bubble) {
                        local.holder.insert(player, to);
                    }
                }
                other => {
                    tracing::warn!(player = player.0, ?other, "player not moved between parts")
                }
            }
        }
        for name in servers.drain(regions.len()..) {
            if let Some(srv) = self.servers.get_mut(&name) {
                srv.bubbles.retain(|b| *b != bubble);
                let conn = srv.conn.clone();
                let _ = conn.request(&server::Request::Release { lease }).await;
            }
        }
        for (name, region) in servers.iter().zip(&regions) {
            if let Some(conn) = self.server_conn(name) {
                let _ = conn.request(&server::Request::Resize { lease, region: *region }).await;
            }
        }
        if let Some(local) = self.bubbles.get_mut(&bubble) {
            local.extra = servers[1..].to_vec();
            let main = local.server.clone();
            let extra = &local.extra;
            local.holder.retain(|_, s| *s != main && extra.contains(s));
        }
        self.top_up_pool();
        Ok(())
    }

    pub(super) fn server_conn(&self, name: &Name) -> Option<Conn<Server>> {
        self.servers.get(name).map(|s| s.conn.clone())
    }

    /// The core abandoned a handover of this bubble before the freeze and re-granted it here
    /// under a newer epoch: whatever was prepared for the old epoch stops (a prepare still
    /// opening its transfer is answered now), the bubble keeps running with its state.
    pub(super) async fn regrant(
        &mut self,
        old: LeaseRef,
        lease: Lease,
    ) -> Result<control::Reply, Fault> {
        let received = Instant::now();
        let local = self
            .bubbles
            .get_mut(&old.bubble)
            .filter(|b| b.lease.epoch == old.epoch)
            .ok_or_else(|| unknown(old.bubble))?;
        if !matches!(local.phase, Phase::Running | Phase::Leaving { .. }) {
            return Err(Fault::new(ErrorCode::Conflict, "regrant of a bubble not running here"));
        }
        let servers: Vec<Name> = local.servers().cloned().collect();
        for server in servers {
            let conn = self
                .server_conn(&server)
                .ok_or_else(|| Fault::new(ErrorCode::NotReady, "the bubble's server is gone"))?;
            match conn.request(&server::Request::Regrant { old, lease }).await {
                Ok(server::Reply::Done) => {}
                Ok(other) => {
                    let why = format!("server replied {other:?}");
                    return Err(Fault::new(ErrorCode::Internal, why));
                }
                Err(e) => return Err(Fault::new(ErrorCode::NotReady, format!("regrant: {e}"))),
            }
        }
        if let Some(local) = self.bubbles.get_mut(&old.bubble) {
            local.phase = Phase::Running;
            local.lease = lease;
            local.valid_until = received + Duration::from_millis(u64::from(lease.ttl_ms));
        }
        self.mirrors.remove(&old.bubble);
        let abandoned: Vec<HandoverId> = self
            .pending_prepare
            .iter()
            .filter(|(_, r)| matches!(&r.body, control::Request::Prepare { bubble, .. } if *bubble == old.bubble))
            .map(|(h, _)| *h)
            .collect();
        for h in abandoned {
            if let Some(req) = self.pending_prepare.remove(&h) {
                let fault = Fault::new(ErrorCode::Conflict, "handover abandoned by the core");
                tokio::spawn(req.reply(Err(fault)));
            }
        }
        tracing::info!(site = %self.site, bubble = old.bubble.0, epoch = lease.epoch.0, "bubble regranted");
        Ok(control::Reply::Done)
    }

    pub(super) async fn freeze(&mut self, handover: HandoverId) -> Result<control::Reply, Fault> {
        let bubble = self.bubble_in(|p| p == Phase::Leaving { handover }).ok_or_else(|| {
            Fault::new(ErrorCode::Unexpected, format!("no handover {} here", handover.0))
        })?;
        let local = &self.bubbles[&bubble];
        let lease = LeaseRef { bubble, epoch: local.lease.epoch };
        let conn = self
            .servers
            .get(&local.server)
            .map(|s| s.conn.clone())
            .ok_or_else(|| Fault::new(ErrorCode::NotReady, "the bubble's server is gone"))?;
        match conn.request(&server::Request::Freeze { lease }).await {
            Ok(server::Reply::Frozen { tick }) => {
                if let Some(local) = self.bubbles.get_mut(&bubble) {
                    local.phase = Phase::Sealed { handover };
                }
                Ok(control::Reply::Frozen { handover, tick })
            }
            Ok(other) => Err(Fault::new(ErrorCode::Internal, format!("server replied {other:?}"))),
            Err(e) => Err(Fault::new(ErrorCode::NotReady, format!("freeze: {e}"))),
        }
    }

    /// Stops simulating a bubble here (revoked, committed away, refused): the server releases
    /// it and goes back to the pool.
    pub(super) async fn drop_bubble(&mut self, bubble: BubbleId) {
        let Some(local) = self.bubbles.remove(&bubble) else { return };
        self.mirrors.remove(&bubble);
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        let lease = LeaseRef { bubble, epoch: local.lease.epoch };
        for name in local.servers() {
            if let Some(srv) = self.servers.get_mut(name) {
                srv.bubbles.retain(|b| *b != bubble);
                let conn = srv.conn.clone();
                let _ = conn.request(&server::Request::Release { lease }).await;
            }
        }
        tracing::info!(site = %self.site, bubble = bubble.0, "bubble released");
    }

    pub(super) async fn task_done(&mut self, done: Done) {
        match done {
            Done::Registered(reply) => self.registered(reply).await,
            Done::Renewed { sent, reply } => self.renewed(sent, reply).await,
            Done::PlayerIds(reply) => self.ids_granted(reply),
            Done::SourceOpened { handover, bubble, stream } => {
                self.source_opened(handover, bubble, stream).await
            }
        }
    }
}
