//! The core link: registration (full resync), reports, batched renewals, and the core's orders.

use super::*;

impl Agent {
    pub(super) fn register(&mut self, conn: Conn<Control>) {
        let held = self
            .bubbles
            .values()
            .filter(|b| b.phase == Phase::Running)
            .map(|b| control::Held {
                lease: LeaseRef { bubble: b.lease.bubble, epoch: b.lease.epoch },
                tick: Tick(0),
            })
            .collect();
        let register = control::Request::Register {
            site: self.site.clone(),
            build: name(env!("CARGO_PKG_VERSION")),
            transfer_addr: self.cfg.advertise_transfer.clone(),
            servers: self.server_loads(),
            held,
        };
        self.backups = Some(open_stream_task(conn.clone()));
        let events = self.events.clone();
        tokio::spawn(async move {
            match conn.request(&register).await {
                Ok(reply) => {
                    let _ = events.send(Event::Task(Done::Registered(reply))).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "registration failed; retried at reconnection")
                }
            }
        });
    }

    /// Every server's load. The servers of a bubble spread over several are listed in part
    /// order (the core reads each part's tick rate from that order).
    pub(super) fn server_loads(&self) -> Vec<control::ServerLoad> {
        let part = |name: &Name, bubbles: &[BubbleId]| {
            let b = bubbles.first().and_then(|b| self.bubbles.get(b));
            (bubbles.first().map(|b| b.0), b.and_then(|b| b.servers().position(|s| s == name)))
        };
        let mut loads: Vec<_> = self
            .servers
            .iter()
            .map(|(n, s)| {
                let load = control::ServerLoad {
                    server: n.clone(),
                    tps: s.tps,
                    players: s.players,
                    chunks_loading: 0,
                    ready: s.ready && s.bubbles.is_empty(),
                    bubbles: s.bubbles.clone(),
                };
                (part(n, &s.bubbles), load)
            })
            .collect();
        loads.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.server.cmp(&b.1.server)));
        loads.into_iter().map(|(_, l)| l).collect()
    }

    pub(super) async fn registered(&mut self, reply: control::Reply) {
        let control::Reply::Registered { keep, stop, peers, generation, .. } = reply else {
            tracing::warn!(?reply, "unexpected reply to register");
            return;
        };
        self.registered = true;
        tracing::info!(site = %self.site, generation, peers = peers.len(), "registered with the core");
        for lease in keep {
            if let Some(b) = self.bubbles.get_mut(&lease.bubble) {
                b.lease = lease;
            }
        }
        for lref in stop {
            self.drop_bubble(lref.bubble).await;
        }
        self.adopt_peers(peers);
        self.ask_ids();
        // Full resync of this site's players: a restarted core puts them back where they play.
        let players = self
            .players
            .iter()
            .map(|(&id, gw)| control::PlacedPlayer {
                sample: self.sample(id, gw),
                bubble: gw.session.route().map(|(b, _)| *b),
            })
            .collect();
        self.joins.clear();
        let core = self.core.clone();
        tokio::spawn(async move {
            if let Err(e) = core.request(&control::Request::Players { players }).await {
                tracing::warn!(error = %e, "player resync lost; sent again at the next registration");
            }
        });
    }

    /// Dials the sites this agent must dial (one connection per pair: the site whose name
    /// sorts first dials), at the configured address if any, else the one the core gave.
    pub(super) fn adopt_peers(&mut self, peers: Vec<control::Peer>) {
        for peer in peers {
            let addr = self
                .cfg
                .peers
                .get(peer.site.as_str())
                .copied()
                .or_else(|| peer.transfer_addr.parse().ok());
            // One connection per pair: the site whose name sorts first dials.
            if self.site.as_str() > peer.site.as_str() || self.dialed.contains_key(&peer.site) {
                continue;
            }
            match addr {
                Some(addr) => self.dial_peer(peer.site, addr),
                None => {
                    tracing::warn!(peer = %peer.site, addr = %peer.transfer_addr, "peer address unusable")
                }
            }
        }
    }

    pub(super) fn dial_peer(&mut self, site: Name, addr: SocketAddr) {
        let config = match tls::client_config(
            &self.roots,
            Some(&self.identity),
            ChannelId::Transfer,
            &self.limits,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "transfer client config");
                return;
            }
        };
        let parts = Link::<Transfer>::connect(Dial {
            endpoint: self.endpoint.clone(),
            addr,
            server_name: horizon_transport::site_dns_name(site.as_str()),
            config,
            hello: HelloParams::new(self.site.clone()),
            limits: self.limits.clone(),
        });
        let events = self.events.clone();
        let mut link_events = parts.events;
        let mut inbound = parts.inbound;
        let peer = site.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    e = link_events.recv() => match e {
                        Some(LinkEvent::Up(conn)) => {
                            if events.send(Event::PeerUp(conn, None)).await.is_err() { break }
                        }
                        Some(_) => {}
                        None => break,
                    },
                    i = inbound.recv() => match i {
                        Some(i) => {
                            if events.send(Event::PeerInbound(peer.clone(), i)).await.is_err() { break }
                        }
                        None => break,
                    },
                }
            }
        });
        self.dialed.insert(site, parts.link);
    }

    pub(super) fn report(&mut self) {
        if !self.registered {
            return;
        }
        let Some(conn) = self.core.current() else { return };
        let players = self.players.iter().map(|(&id, gw)| self.sample(id, gw)).collect();
        let backbone = self
            .peers
            .iter()
            .map(|(site, p)| control::BackboneSample {
                site: site.clone(),
                rtt_ms: p.rtt_ms,
                loss: if p.probes_sent == 0 {
                    0.0
                } else {
                    1.0 - p.probes_back.min(p.probes_sent) as f32 / p.probes_sent as f32
                },
            })
            .collect();
        let report = control::Request::Report {
            joins: std::mem::take(&mut self.joins),
            leaves: std::mem::take(&mut self.leaves),
            players,
            backbone,
            servers: self.server_loads(),
        };
        tokio::spawn(async move {
            if let Err(e) = conn.request(&report).await {
                tracing::warn!(error = %e, "report lost");
            }
        });
    }

    pub(super) fn sample(&self, id: PlayerId, gw: &Gw) -> control::PlayerSample {
        control::PlayerSample {
            player: id,
            access_rtt_ms: gw.min_rtt_ms,
            role: gw.role,
            world: gw.world,
            pos: gw.pos,
            vel: gw.vel,
        }
    }

    /// One batched renewal for every lease this site runs or stands by for. A handover source
    /// is left out: its epoch is superseded, and it stops at the freeze well within its lease.
    pub(super) fn renew(&mut self) {
        if !self.registered {
            return;
        }
        let leases: Vec<LeaseRef> = self
            .bubbles
            .values()
            .filter(|b| !matches!(b.phase, Phase::Leaving { .. } | Phase::Sealed { .. }))
            .map(|b| LeaseRef { bubble: b.lease.bubble, epoch: b.lease.epoch })
            .collect();
        if leases.is_empty() {
            return;
        }
        let core = self.core.clone();
        let events = self.events.clone();
        let sent = Instant::now();
        tokio::spawn(async move {
            match core.request(&control::Request::Renew { leases }).await {
                Ok(reply) => {
                    let _ = events.send(Event::Task(Done::Renewed { sent, reply })).await;
                }
                Err(e) => tracing::warn!(error = %e, "renewal lost"),
            }
        });
    }

    pub(super) async fn renewed(&mut self, sent: Instant, reply: control::Reply) {
        let control::Reply::Renewed { ttl_ms, granted, refused } = reply else { return };
        let sent_ago_ms = sent.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
        let mut per_server: HashMap<Name, Vec<LeaseRef>> = HashMap::new();
        let until = sent + Duration::from_millis(u64::from(ttl_ms));
        for l in granted {
            if let Some(b) = self.bubbles.get_mut(&l.bubble).filter(|b| b.lease.epoch == l.epoch) {
                b.valid_until = b.valid_until.max(until);
                b.told_reconnecting = false;
                for server in b.servers() {
                    per_server.entry(server.clone()).or_default().push(l);
                }
            }
        }
        for (server, leases) in per_server {
            let Some(srv) = self.servers.get(&server) else { continue };
            let conn = srv.conn.clone();
            let req = server::Request::Renew { leases, ttl_ms, sent_ago_ms };
            tokio::spawn(async move {
                let _ = conn.request(&req).await;
            });
        }
        for l in refused {
            if self.bubbles.get(&l.bubble).is_some_and(|b| b.lease.epoch == l.epoch) {
                tracing::warn!(bubble = l.bubble.0, epoch = l.epoch.0, "renewal refused: stopping");
                self.drop_bubble(l.bubble).await;
            }
        }
    }

    /// One order of the core, received at `received` (earlier than now if it waited for a
    /// server: leases it grants count from then).
    pub(super) async fn core_request(&mut self, req: InboundRequest<Control>, received: Instant) {
        use control::Request as R;
        if self.servers_needed(&req.body) > self.free_servers() {
            // Served when a server is ready (the pool grows for it), or refused at the deadline.
            self.waiting.push_back((received, req));
            self.top_up_pool();
            return;
        }
        let result = match &req.body {
            R::Create { bubble, region, lease } => {
                self.create(*bubble, *region, *lease, received).await
            }
            R::Restore { lease, region, from, tick, copy } => {
                match self.restore(*lease, *region, *from, *tick, copy, received).await {
                    Ok(None) => Ok(control::Reply::Done),
                    Ok(Some(bubble)) => {
                        // Answered at the server's first update under the new epoch.
                        self.pending_restore.insert(bubble, (received, req));
                        return;
                    }
                    Err(fault) => Err(fault),
                }
            }
            R::Covered { players } => {
                self.covered(players);
                Ok(control::Reply::Done)
            }
            R::Resize { lease, region } => self.resize(*lease, *region).await,
            R::Members { lease, players, departed } => {
                self.members(*lease, players.clone(), departed.clone()).await
            }
            R::Route { routes } => {
                self.route(routes.clone());
                Ok(control::Reply::Done)
            }
            R::Peers { peers } => {
                self.adopt_peers(peers.clone());
                Ok(control::Reply::Done)
            }
            R::Prepare { handover, bubble, source, target, lease, .. } => {
                if target == &self.site {
                    self.prepare_target(*handover, *bubble, source.clone(), *lease).await
                } else if source == &self.site {
                    // The snapshot comes from one server: bring a spread bubble back onto it.
                    if let Err(fault) = self.consolidate(*bubble).await {
                        let _ = req.reply(Err(fault)).await;
                        return;
                    }
                    let (h, b, t) = (*handover, *bubble, target.clone());
                    self.prepare_source(h, b, t, *lease, req);
                    return;
                } else {
                    Err(Fault::new(ErrorCode::Unexpected, "prepare for a handover of other sites"))
                }
            }
            R::Freeze { handover } => self.freeze(*handover).await,
            R::Commit { handover } => {
                let h = *handover;
                let bubble = self.bubble_in(|p| {
                    p == Phase::Leaving { handover: h } || p == Phase::Sealed { handover: h }
                });
                if let Some(bubble) = bubble {
                    self.drop_bubble(bubble).await;
                }
                Ok(control::Reply::Done)
            }
            R::Abort { handover, reason } => {
                tracing::warn!(handover = handover.0, %reason, "handover aborted");
                if let Some(b) = self.bubble_in(|p| p == Phase::Standby { handover: *handover }) {
                    self.drop_bubble(b).await;
                }
                if let Some(b) = self.bubble_in(|p| p == Phase::Leaving { handover: *handover }) {
                    self.mirrors.remove(&b);
                    if let Some(local) = self.bubbles.get_mut(&b) {
                        local.phase = Phase::Running;
                    }
                }
                if let Some(b) = self.bubble_in(|p| p == Phase::Sealed { handover: *handover }) {
                    tracing::error!(
                        bubble = b.0,
                        "abort after the seal: the bubble stays sealed until revoked"
                    );
                }
                Ok(control::Reply::Done)
            }
            R::Regrant { old, lease } => self.regrant(*old, *lease).await,
            R::Parts { lease, parts, players } => {
                self.spread(*lease, parts.clone(), players.clone()).await
            }
            R::Revoke { leases } => {
                for l in leases.clone() {
                    if self.bubbles.get(&l.bubble).is_some_and(|b| b.lease.epoch == l.epoch) {
                        self.drop_bubble(l.bubble).await;
                    }
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
            | R::Failed { .. } => {
                Err(Fault::new(ErrorCode::Unexpected, "an agent request, sent by the core"))
            }
        };
        let _ = req.reply(result).await;
    }

    /// How many ready servers an order takes.
    pub(super) fn servers_needed(&self, body: &control::Request) -> usize {
        use control::Request as R;
        match body {
            R::Create { bubble, .. } => usize::from(!self.bubbles.contains_key(bubble)),
            R::Restore { lease, .. } => usize::from(
                self.bubbles.get(&lease.bubble).is_none_or(|b| b.lease.epoch != lease.epoch),
            ),
            R::Prepare { target, .. } => usize::from(target == &self.site),
            // Nothing for a bubble not held here or a cut beyond the limit: refused at once.
            R::Parts { lease, parts, .. } => match self.bubbles.get(&lease.bubble) {
                Some(b) if parts.len() <= MAX_PARTS => {
                    parts.len().saturating_sub(1 + b.extra.len())
                }
                _ => 0,
            },
            _ => 0,
        }
    }
}
