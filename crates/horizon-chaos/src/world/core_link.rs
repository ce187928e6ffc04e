//! The agent–core link: the core's orders to an agent (its ordered lane: numbered, at most
//! `control::MAX_IN_ORDER` unanswered; and direct ones), and what each side sends the other.

use super::*;

impl World {
    pub(super) fn core_send(
        &mut self,
        site: usize,
        conn: u64,
        lane: Lane,
        order: OrderId,
        request: control::Request,
        at: u64,
    ) {
        if self.controls[site].conn != conn || conn == 0 {
            // Never sent.
            let result = Err(Failure::Unreachable("agent connection gone".into()));
            self.core_input_later(core::Input::OrderDone { order, result }, at);
            return;
        }
        match lane {
            Lane::Ordered => {
                self.controls[site].waiting.push_back((order, request));
                self.send_in_order(site, at);
            }
            Lane::Direct => self.deliver_order(site, conn, order, request, at),
        }
    }

    /// Sends the ordered lane's waiting orders, numbered, while fewer than
    /// `control::MAX_IN_ORDER` are unanswered.
    pub(super) fn send_in_order(&mut self, site: usize, at: u64) {
        let conn = self.controls[site].conn;
        while self.controls[site].unanswered.len() < control::MAX_IN_ORDER as usize {
            let c = &mut self.controls[site];
            let Some((order, request)) = c.waiting.pop_front() else { return };
            let seq = c.next_in_order;
            c.next_in_order += 1;
            c.unanswered.insert(order);
            // The lane is named by the connection (the core draws it at random).
            let request = control::Request::InOrder { lane: conn, seq, order: Box::new(request) };
            self.deliver_order(site, conn, order, request, at);
        }
    }

    pub(super) fn deliver_order(
        &mut self,
        site: usize,
        conn: u64,
        order: OrderId,
        request: control::Request,
        at: u64,
    ) {
        let token = self.ids.token();
        self.orders.insert(token, (site, conn, order));
        let input = agent::Input::CoreOrder { token, order: request };
        self.send_to_agent(site, conn, input, at);
    }

    pub(super) fn core_input_later(&mut self, input: core::Input, at: u64) {
        // Results the core's own shell produces at once (no connection to carry them).
        let d = Delivery::ToCore { site: usize::MAX, conn: 0, input };
        self.schedule_at(at, Event::Deliver(Box::new(d)));
    }

    pub(super) fn send_to_agent(&mut self, site: usize, conn: u64, input: agent::Input, at: u64) {
        let delay = self.control_delay(site);
        // Replies, and the ordered lane's numbered orders (each on a stream of its own, with
        // loss and jitter), may overtake each other: the agent puts the orders back in order.
        let overtakes = matches!(
            input,
            agent::Input::CoreReplied { .. }
                | agent::Input::CoreOrder { order: control::Request::InOrder { .. }, .. }
        );
        let d = Delivery::CoreToAgent { site, conn, input };
        if self.controls[site].cut_from_core {
            self.controls[site].held.push((false, d));
            return;
        }
        let at = if overtakes { at + delay } else { self.in_order((1, site, 0, conn), at + delay) };
        self.schedule_at(at, Event::Deliver(Box::new(d)));
    }

    pub(super) fn send_to_core(
        &mut self,
        site: usize,
        conn: u64,
        input: core::Input,
        ordered_stream: bool,
    ) {
        let delay = self.control_delay(site);
        let d = Delivery::ToCore { site, conn, input };
        if self.controls[site].cut_to_core {
            self.controls[site].held.push((true, d));
            return;
        }
        let mut at = self.time.now() + delay;
        if ordered_stream {
            at = self.in_order((2, site, 0, conn), at);
        }
        self.schedule_at(at, Event::Deliver(Box::new(d)));
    }

    /// The order the core sent under agent `token`, answered now: (site, connection, order).
    pub(super) fn order_answered(&mut self, token: u64) -> Option<(usize, u64, OrderId)> {
        self.orders.remove(&token)
    }

    /// The orders that reached an agent over `conn`, which is gone, unanswered: in token order.
    pub(super) fn orders_lost(&mut self, conn: u64) -> Vec<OrderId> {
        let tokens: Vec<u64> =
            self.orders.iter().filter(|(_, v)| v.1 == conn).map(|(t, _)| *t).collect();
        tokens.into_iter().filter_map(|t| self.orders.remove(&t)).map(|(_, _, o)| o).collect()
    }

    /// Every order at the agents, forgotten with the core that sent them.
    pub(super) fn forget_orders(&mut self) {
        self.orders.clear();
    }

    /// An agent (re)dials the core.
    pub(super) fn redial(&mut self, site: usize) {
        if !self.agent_alive(site) || self.controls[site].conn != 0 {
            return;
        }
        let c = &self.controls[site];
        if !self.core_up() || c.cut_to_core || c.cut_from_core {
            self.schedule(REDIAL_US, Event::Redial(site));
            return;
        }
        let conn = self.ids.conn();
        self.controls[site].conn = conn;
        self.controls[site].next_in_order = 0;
        self.controls[site].unanswered.clear();
        self.controls[site].waiting.clear();
        self.note(format!("{} connected to the core (conn {conn})", SITES[site]));
        self.core_input(core::Input::AgentConnected { site: self.site_id(site), conn });
        self.agent_input(site, agent::Input::CoreUp);
    }

    /// `site`'s connection to the core (0: none).
    pub(super) fn control_conn(&self, site: usize) -> u64 {
        self.controls[site].conn
    }

    /// The site whose connection to the core is `conn`.
    pub(super) fn control_site_of(&self, conn: u64) -> Option<usize> {
        self.controls.iter().position(|c| c.conn == conn)
    }

    /// `site`'s connection to the core closes: its id and the orders queued never sent, or
    /// `None` if there was none. What the link held and its lane are forgotten.
    pub(super) fn control_closed(&mut self, site: usize) -> Option<(u64, Vec<OrderId>)> {
        let c = &mut self.controls[site];
        if c.conn == 0 {
            return None;
        }
        let conn = std::mem::take(&mut c.conn);
        c.held.clear();
        c.next_in_order = 0;
        c.unanswered.clear();
        Some((conn, c.waiting.drain(..).map(|(o, _)| o).collect()))
    }

    /// The agent answered lane order `order` of `site`: whether the lane had it out (room now).
    pub(super) fn control_answered(&mut self, site: usize, order: &OrderId) -> bool {
        self.controls[site].unanswered.remove(order)
    }

    /// A control link's idle timer fired: a connection still cut then is down.
    pub(super) fn control_idle(&mut self, site: usize, conn: u64) {
        let c = &self.controls[site];
        if c.conn == conn && (c.cut_to_core || c.cut_from_core) {
            self.control_down(site, "idle timeout");
        }
    }

    /// The loss rate of `site`'s link to the core, each way.
    pub(super) fn control_loss(&self, site: usize) -> f64 {
        self.controls[site].loss
    }

    /// Sets the loss rate of `site`'s link to the core.
    pub(super) fn set_control_loss(&mut self, site: usize, rate: f64) {
        self.controls[site].loss = rate;
    }

    /// Cuts `site`'s link to the core the ways given: its connection.
    pub(super) fn cut_control(&mut self, site: usize, to_core: bool, from_core: bool) -> u64 {
        let c = &mut self.controls[site];
        c.cut_to_core = to_core;
        c.cut_from_core = from_core;
        c.conn
    }

    /// Heals `site`'s link to the core: what the cut held, (towards the core, delivery), in order.
    pub(super) fn heal_control(&mut self, site: usize) -> Vec<(bool, Delivery)> {
        let c = &mut self.controls[site];
        c.cut_to_core = false;
        c.cut_from_core = false;
        std::mem::take(&mut c.held)
    }
}
