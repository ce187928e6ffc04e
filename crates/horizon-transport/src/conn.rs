//! One established connection of a channel: typed requests, long-lived streams, datagrams, and
//! the inbound side that serves the peer's requests (with replay by request id).

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use horizon_proto::frame::{decode, decode_header, decode_payload};
use horizon_proto::{
    Channel, ErrorCode, Fault, HEADER_BYTES, Name, ReplyFrame, RequestFrame, RequestId,
};
use tokio::sync::mpsc;

use crate::error::Error;
use crate::limits::Limits;
use crate::metrics::TransportStats;

/// A connection of channel `C` after a successful hello. Cheap to clone.
pub struct Conn<C: Channel> {
    pub(crate) quic: quinn::Connection,
    pub(crate) version: u8,
    pub(crate) peer: Name,
    pub(crate) limits: Arc<Limits>,
    pub(crate) ids: Arc<AtomicU64>,
    pub(crate) counters: Arc<Counters>,
    /// The daemon's counters, which this connection adds to.
    pub(crate) stats: TransportStats,
    serial: u64,
    _channel: PhantomData<fn() -> C>,
}

/// Numbers connections in this process (quinn's `stable_id` is an address, reused after a
/// connection is freed, so it cannot tell a new connection from a dead one).
static SERIALS: AtomicU64 = AtomicU64::new(1);

impl<C: Channel> Clone for Conn<C> {
    fn clone(&self) -> Self {
        Conn {
            quic: self.quic.clone(),
            version: self.version,
            peer: self.peer.clone(),
            limits: self.limits.clone(),
            ids: self.ids.clone(),
            counters: self.counters.clone(),
            stats: self.stats.clone(),
            serial: self.serial,
            _channel: PhantomData,
        }
    }
}

impl<C: Channel> std::fmt::Debug for Conn<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("channel", &C::ID)
            .field("peer", &self.peer)
            .field("version", &self.version)
            .field("remote", &self.quic.remote_address())
            .finish()
    }
}

/// What the transport saw, for metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Inbound datagrams dropped because the application's queue was full.
    pub datagrams_dropped: AtomicU64,
    /// Retried requests answered from memory instead of being run again.
    pub replays: AtomicU64,
}

/// Path statistics of a connection, from quinn (the server-side measurement: nothing here
/// comes from the peer's word).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkStats {
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Lowest round-trip time seen.
    pub min_rtt: Duration,
    pub sent_packets: u64,
    pub lost_packets: u64,
    pub congestion_events: u64,
}

impl LinkStats {
    /// Share of sent packets declared lost, 0–1.
    pub fn loss(&self) -> f64 {
        if self.sent_packets == 0 {
            0.0
        } else {
            self.lost_packets as f64 / self.sent_packets as f64
        }
    }
}

impl<C: Channel> Conn<C> {
    pub(crate) fn new(
        quic: quinn::Connection,
        version: u8,
        peer: Name,
        limits: Arc<Limits>,
        ids: Arc<AtomicU64>,
        stats: TransportStats,
    ) -> Self {
        let serial = SERIALS.fetch_add(1, Ordering::Relaxed);
        Conn {
            quic,
            version,
            peer,
            limits,
            ids,
            counters: Arc::default(),
            stats,
            serial,
            _channel: PhantomData,
        }
    }

    /// The peer's name from its hello (verified against its certificate on site channels).
    pub fn peer(&self) -> &Name {
        &self.peer
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> u8 {
        self.version
    }

    pub fn remote_address(&self) -> std::net::SocketAddr {
        self.quic.remote_address()
    }

    /// The bounds this connection runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Identifies this connection among every connection of the process (never reused).
    pub fn id(&self) -> u64 {
        self.serial
    }

    pub fn stats(&self) -> LinkStats {
        let path = self.quic.stats().path;
        LinkStats {
            rtt: path.rtt,
            min_rtt: path.min_rtt,
            sent_packets: path.sent_packets,
            lost_packets: path.lost_packets,
            congestion_events: path.congestion_events,
        }
    }

    /// The underlying quinn connection (for measurements and tests that need raw streams).
    pub fn quic(&self) -> &quinn::Connection {
        &self.quic
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A fresh request id.
    pub fn next_id(&self) -> RequestId {
        RequestId(self.ids.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request and waits for its reply, at most the request timeout.
    pub async fn request(&self, body: &C::Request) -> Result<C::Reply, Error> {
        let ms = self.limits.request_timeout.as_millis() as u64;
        tokio::time::timeout(self.limits.request_timeout, self.call(self.next_id(), body))
            .await
            .map_err(|_| Error::Timeout { ms })?
    }

    /// Sends a request under `id` on a new stream and reads its reply. No timeout: callers
    /// wrap it (a [`crate::Link`] retries the same id on the next connection).
    pub async fn call(&self, id: RequestId, body: &C::Request) -> Result<C::Reply, Error> {
        self.send_request(id, body).await?.reply().await
    }

    /// Sends a request under `id` on a new stream, without waiting for its reply: requests
    /// sent one after the other leave in that order (their replies may not). Read the reply
    /// with [`SentRequest::reply`]; no timeout.
    pub async fn send_request(
        &self,
        id: RequestId,
        body: &C::Request,
    ) -> Result<SentRequest<C>, Error> {
        let mut frame = Vec::new();
        let request = RequestFrame { id, body };
        horizon_proto::frame::encode(
            &request,
            self.version,
            C::ID,
            self.limits.max_frame_bytes,
            &mut frame,
        )?;
        let (mut send, recv) = self.quic.open_bi().await?;
        send.write_all(&frame).await?;
        // Finishing only fails if the stream was reset, which the reply's read reports next.
        let _ = send.finish();
        Ok(SentRequest { conn: self.clone(), id, recv })
    }

    /// Sends an unreliable datagram. Fails if it is over the limit or the peer disabled them.
    pub fn send_datagram(&self, datagram: &C::Datagram) -> Result<(), Error> {
        let frame = horizon_proto::frame::to_frame(
            datagram,
            self.version,
            C::ID,
            self.limits.max_datagram_bytes,
        )?;
        self.quic.send_datagram(Bytes::from(frame)).map_err(|e| match e {
            quinn::SendDatagramError::ConnectionLost(e) => e.into(),
            other => Error::Lost(other.to_string()),
        })
    }

    /// Opens a long-lived stream of items to the peer.
    pub async fn open_stream(&self) -> Result<StreamSender<C>, Error> {
        let send = self.quic.open_uni().await?;
        Ok(StreamSender { send, conn: self.clone(), last_len: 0 })
    }

    /// Closes the connection with a code the peer will see.
    pub fn close(&self, code: ErrorCode, reason: &str) {
        self.quic.close(quinn::VarInt::from(code.to_u16()), reason.as_bytes());
    }

    /// Waits until the connection is closed and says why.
    pub async fn closed(&self) -> Error {
        self.quic.closed().await.into()
    }

    /// Reads one frame's payload; `None` when the stream ended cleanly between frames. A bad
    /// frame closes the connection with its error code.
    pub(crate) async fn read_frame(
        &self,
        recv: &mut quinn::RecvStream,
    ) -> Result<Option<Vec<u8>>, Error> {
        let check =
            |head: &[u8]| decode_header(head, self.version, C::ID, self.limits.max_frame_bytes);
        match read_payload(recv, check).await {
            Ok(payload) => Ok(payload),
            Err(ReadFailure::Frame(e)) => self.decoded(Err(e)),
            Err(ReadFailure::Read(e)) => Err(e.into()),
        }
    }

    /// Passes a decode result through, closing the connection on a bad frame.
    pub(crate) fn decoded<T>(
        &self,
        result: Result<T, horizon_proto::DecodeError>,
    ) -> Result<T, Error> {
        result.map_err(|e| {
            tracing::warn!(channel = C::ID.as_str(), peer = %self.peer, error = %e, "bad frame, closing");
            self.close(e.code(), &e.to_string());
            Error::Frame(e)
        })
    }
}

/// Why [`read_payload`] found no frame.
pub(crate) enum ReadFailure {
    /// The bytes are not a valid frame (truncated, bad header).
    Frame(horizon_proto::DecodeError),
    /// The stream or connection failed.
    Read(quinn::ReadError),
}

/// Reads the one frame of a request, reply or hello stream (each carries one, then finishes): a
/// header checked by `check`, then exactly its payload. `None` when the stream ended cleanly
/// before a frame began. Closes nothing: callers decide.
pub(crate) async fn read_payload(
    recv: &mut quinn::RecvStream,
    check: impl FnOnce(&[u8]) -> Result<horizon_proto::frame::Header, horizon_proto::DecodeError>,
) -> Result<Option<Vec<u8>>, ReadFailure> {
    let mut payload = Vec::new();
    Ok(Gulps::default().frame(recv, check, &mut payload).await?.then_some(payload))
}

/// A request sent, its reply still to read (see [`Conn::send_request`]).
pub struct SentRequest<C: Channel> {
    conn: Conn<C>,
    id: RequestId,
    recv: quinn::RecvStream,
}

impl<C: Channel> std::fmt::Debug for SentRequest<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentRequest").field("peer", &self.conn.peer).field("id", &self.id).finish()
    }
}

impl<C: Channel> SentRequest<C> {
    /// Waits for the reply (no timeout: wrap it).
    pub async fn reply(mut self) -> Result<C::Reply, Error> {
        let (conn, id) = (&self.conn, self.id);
        let Some(payload) = conn.read_frame(&mut self.recv).await? else {
            return Err(Error::Lost(format!(
                "{} closed the request stream without a reply",
                conn.peer
            )));
        };
        let reply: ReplyFrame<C::Reply> = conn.decoded(decode_payload(&payload))?;
        if reply.id != id {
            let why = format!("reply for request {} on the stream of request {}", reply.id.0, id.0);
            conn.close(ErrorCode::Malformed, &why);
            return Err(Error::Closed { code: ErrorCode::Malformed, reason: why });
        }
        reply.result.map_err(Error::Fault)
    }
}

/// The sending end of a long-lived stream. Sending waits while the peer's flow-control window
/// is full: a slow reader slows the writer down instead of growing a buffer.
pub struct StreamSender<C: Channel> {
    send: quinn::SendStream,
    conn: Conn<C>,
    /// The size of the last frame sent, to size the next one's buffer.
    last_len: usize,
}

impl<C: Channel> std::fmt::Debug for StreamSender<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSender").field("conn", &self.conn).finish()
    }
}

impl<C: Channel> StreamSender<C> {
    pub async fn send(&mut self, item: &C::Stream) -> Result<(), Error> {
        // A fresh buffer, sized like the last frame, handed to quinn as is: no copy into its
        // send buffer.
        let mut frame = Vec::with_capacity(self.last_len);
        horizon_proto::frame::encode(
            item,
            self.conn.version,
            C::ID,
            self.conn.limits.max_frame_bytes,
            &mut frame,
        )?;
        self.last_len = frame.len();
        self.send.write_chunk(Bytes::from(frame)).await?;
        Ok(())
    }

    /// Ends the stream cleanly; the receiver's `next` then returns `None`.
    pub fn finish(mut self) {
        // Only fails on an already reset stream, where there is nothing left to finish.
        let _ = self.send.finish();
    }
}

/// The receiving end of a long-lived stream.
pub struct StreamReceiver<C: Channel> {
    recv: quinn::RecvStream,
    conn: Conn<C>,
    gulps: Gulps,
    /// The frame being read, kept from frame to frame (at most `max_frame_bytes`).
    payload: Vec<u8>,
}

impl<C: Channel> std::fmt::Debug for StreamReceiver<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReceiver").field("conn", &self.conn).finish()
    }
}

impl<C: Channel> StreamReceiver<C> {
    /// The next item, or `None` when the sender finished the stream. Not cancel-safe: a call
    /// dropped halfway through a frame leaves the stream mid-frame, so do not race it in a
    /// `select!`; give the stream its own task.
    pub async fn next(&mut self) -> Result<Option<C::Stream>, Error> {
        let limit = self.conn.limits.max_frame_bytes;
        let check = |head: &[u8]| decode_header(head, self.conn.version, C::ID, limit);
        match self.gulps.frame(&mut self.recv, check, &mut self.payload).await {
            Ok(true) => self.conn.decoded(decode_payload(&self.payload)).map(Some),
            Ok(false) => Ok(None),
            Err(ReadFailure::Frame(e)) => self.conn.decoded(Err(e)),
            Err(ReadFailure::Read(e)) => Err(e.into()),
        }
    }
}

/// Received chunks a long-lived stream takes from quinn per call.
const GULP: usize = 32;

/// A frame's buffer is reserved up to this before its bytes arrive; beyond, it grows as they do.
const RESERVE_AHEAD_BYTES: usize = 64 << 10;

/// Reads frames from a stream in gulps: up to [`GULP`] received chunks per call into quinn (one
/// lock of the connection for many packets instead of one per packet), kept until frames use
/// them. Holds at most one gulp. Long-lived streams keep one; one-frame streams use a fresh one.
#[derive(Debug, Default)]
struct Gulps {
    pending: VecDeque<Bytes>,
    ended: bool,
}

impl Gulps {
    /// Reads one frame into `payload` (replaced): a header checked by `check`, then exactly its
    /// payload. `false` when the stream ended cleanly before a frame began.
    async fn frame(
        &mut self,
        recv: &mut quinn::RecvStream,
        check: impl FnOnce(&[u8]) -> Result<horizon_proto::frame::Header, horizon_proto::DecodeError>,
        payload: &mut Vec<u8>,
    ) -> Result<bool, ReadFailure> {
        let truncated =
            |got, needed| ReadFailure::Frame(horizon_proto::DecodeError::Truncated { got, needed });
        payload.clear();
        self.take(recv, HEADER_BYTES, payload).await.map_err(ReadFailure::Read)?;
        match payload.len() {
            0 => return Ok(false),
            got if got < HEADER_BYTES => return Err(truncated(got, HEADER_BYTES)),
            _ => {}
        }
        let header = check(payload).map_err(ReadFailure::Frame)?;
        payload.clear();
        // The declared length is the peer's word: memory grows with the bytes that arrive,
        // not with what the header promises (256 open requests could otherwise reserve
        // 256 MiB and send nothing).
        payload.reserve(header.len.min(RESERVE_AHEAD_BYTES));
        self.take(recv, header.len, payload).await.map_err(ReadFailure::Read)?;
        if payload.len() < header.len {
            return Err(truncated(HEADER_BYTES + payload.len(), HEADER_BYTES + header.len));
        }
        Ok(true)
    }

    /// Appends `n` bytes to `out`, fewer only when the stream ended first.
    async fn take(
        &mut self,
        recv: &mut quinn::RecvStream,
        n: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), quinn::ReadError> {
        let mut left = n;
        while left > 0 {
            let Some(front) = self.pending.front_mut() else {
                if self.ended {
                    break;
                }
                let mut chunks: [Bytes; GULP] = Default::default();
                match recv.read_chunks(&mut chunks).await? {
                    Some(got) => self.pending.extend(chunks.into_iter().take(got)),
                    None => self.ended = true,
                }
                continue;
            };
            let k = left.min(front.len());
            out.extend_from_slice(&front.split_to(k));
            if front.is_empty() {
                self.pending.pop_front();
            }
            left -= k;
        }
        Ok(())
    }
}

/// Something the peer sent on its own initiative.
#[derive(Debug)]
pub enum Inbound<C: Channel> {
    Request(InboundRequest<C>),
    Stream(StreamReceiver<C>),
    Datagram(C::Datagram),
}

/// A request from the peer, to be answered once with [`InboundRequest::reply`].
pub struct InboundRequest<C: Channel> {
    pub id: RequestId,
    pub body: C::Request,
    send: Option<quinn::SendStream>,
    conn: Conn<C>,
    replies: Arc<Replies>,
}

impl<C: Channel> std::fmt::Debug for InboundRequest<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundRequest").field("id", &self.id).field("body", &self.body).finish()
    }
}

impl<C: Channel> InboundRequest<C> {
    /// The peer's name.
    pub fn peer(&self) -> &Name {
        &self.conn.peer
    }

    /// The connection the request came on (its RTT, its datagrams, its streams).
    pub fn conn(&self) -> &Conn<C> {
        &self.conn
    }

    /// Answers the request. The reply is remembered, so a retry of the same id (after a
    /// reconnection, say) gets it again without the request running twice.
    pub async fn reply(mut self, result: Result<C::Reply, Fault>) -> Result<(), Error> {
        let frame = ReplyFrame { id: self.id, result };
        let mut bytes = Vec::new();
        let encoded = horizon_proto::frame::encode(
            &frame,
            self.conn.version,
            C::ID,
            self.conn.limits.max_frame_bytes,
            &mut bytes,
        );
        if let Err(e) = encoded {
            // Too large a reply: the peer gets a fault instead, and so does a retry.
            let fault = ReplyFrame::<C::Reply> {
                id: self.id,
                result: Err(Fault::new(e.code(), e.to_string())),
            };
            bytes.clear();
            horizon_proto::frame::encode(
                &fault,
                self.conn.version,
                C::ID,
                self.conn.limits.max_frame_bytes,
                &mut bytes,
            )?;
        }
        let bytes: Arc<[u8]> = bytes.into();
        self.replies.done(self.id, bytes.clone());
        // `send` is only taken here, and `reply` consumes self.
        let Some(mut send) = self.send.take() else { return Ok(()) };
        send.write_all(&bytes).await?;
        let _ = send.finish();
        Ok(())
    }
}

impl<C: Channel> Drop for InboundRequest<C> {
    fn drop(&mut self) {
        if let Some(mut send) = self.send.take() {
            // Dropped without a reply: forget it so a retry runs it, and tell the peer now.
            self.replies.forget(self.id);
            let _ = send.reset(quinn::VarInt::from(ErrorCode::Internal.to_u16()));
        }
    }
}

/// Replies remembered for one peer, by request id (bounded, oldest first out).
#[derive(Debug)]
pub(crate) struct Replies {
    slots: Mutex<ReplySlots>,
}

#[derive(Debug)]
struct ReplySlots {
    map: HashMap<RequestId, Slot>,
    order: VecDeque<RequestId>,
    cap: usize,
}

#[derive(Debug)]
enum Slot {
    /// Running; the hash of the request's bytes tells a retry from a different request.
    Pending(u64),
    Done(u64, Arc<[u8]>),
}

enum Seen {
    New,
    Running,
    Replied(Arc<[u8]>),
    Conflict,
}

impl Replies {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Replies {
            slots: Mutex::new(ReplySlots { map: HashMap::new(), order: VecDeque::new(), cap }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplySlots> {
        // A panic while holding this lock leaves plain data; the map stays usable.
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check(&self, id: RequestId, hash: u64) -> Seen {
        let mut slots = self.lock();
        match slots.map.get(&id) {
            Some(Slot::Pending(h)) if *h == hash => Seen::Running,
            Some(Slot::Done(h, bytes)) if *h == hash => Seen::Replied(bytes.clone()),
            Some(_) => Seen::Conflict,
            None => {
                slots.map.insert(id, Slot::Pending(hash));
                slots.order.push_back(id);
                while slots.order.len() > slots.cap {
                    if let Some(old) = slots.order.pop_front() {
                        slots.map.remove(&old);
                    }
                }
                Seen::New
            }
        }
    }

    fn done(&self, id: RequestId, bytes: Arc<[u8]>) {
        let mut slots = self.lock();
        if let Some(slot) = slots.map.get_mut(&id) {
            let hash = match slot {
                Slot::Pending(h) | Slot::Done(h, _) => *h,
            };
            *slot = Slot::Done(hash, bytes);
        }
    }

    fn forget(&self, id: RequestId) {
        let mut slots = self.lock();
        slots.map.remove(&id);
        slots.order.retain(|&o| o != id);
    }
}

/// Starts the tasks that read what the peer initiates (requests, streams, datagrams) and hands
/// it to `inbound`. They stop when the connection closes or `inbound` is dropped.
pub(crate) fn serve_inbound<C: Channel>(
    conn: &Conn<C>,
    replies: Arc<Replies>,
    inbound: mpsc::Sender<Inbound<C>>,
) {
    tokio::spawn(accept_requests(conn.clone(), replies, inbound.clone()));
    tokio::spawn(accept_streams(conn.clone(), inbound.clone()));
    tokio::spawn(accept_datagrams(conn.clone(), inbound));
}

async fn accept_requests<C: Channel>(
    conn: Conn<C>,
    replies: Arc<Replies>,
    inbound: mpsc::Sender<Inbound<C>>,
) {
    while let Ok((send, recv)) = conn.quic.accept_bi().await {
        tokio::spawn(serve_request(conn.clone(), replies.clone(), inbound.clone(), send, recv));
    }
}

async fn serve_request<C: Channel>(
    conn: Conn<C>,
    replies: Arc<Replies>,
    inbound: mpsc::Sender<Inbound<C>>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let payload = match conn.read_frame(&mut recv).await {
        Ok(Some(payload)) => payload,
        Ok(None) => {
            conn.decoded::<()>(Err(horizon_proto::DecodeError::Truncated {
                got: 0,
                needed: HEADER_BYTES,
            }))
            .ok();
            return;
        }
        Err(_) => return,
    };
    let Ok(request) = conn.decoded(decode_payload::<RequestFrame<C::Request>>(&payload)) else {
        return;
    };
    let hash = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        payload.hash(&mut h);
        h.finish()
    };
    let id = request.id;
    let immediate = |result: Result<C::Reply, Fault>| {
        horizon_proto::frame::to_frame(
            &ReplyFrame { id, result },
            conn.version,
            C::ID,
            conn.limits.max_frame_bytes,
        )
    };
    let bytes: Arc<[u8]> = match replies.check(id, hash) {
        Seen::New => {
            let request = InboundRequest {
                id,
                body: request.body,
                send: Some(send),
                conn: conn.clone(),
                replies,
            };
            // Awaiting here is the back-pressure: while the application is behind, this
            // stream stays open and the peer's request credit runs out.
            let _ = inbound.send(Inbound::Request(request)).await;
            return;
        }
        Seen::Replied(bytes) => {
            conn.counters.replays.fetch_add(1, Ordering::Relaxed);
            conn.stats.replayed(C::ID);
            bytes
        }
        Seen::Running => {
            match immediate(Err(Fault::new(ErrorCode::Busy, "request still running; retry later")))
            {
                Ok(bytes) => bytes.into(),
                Err(_) => return,
            }
        }
        Seen::Conflict => {
            let fault = Fault::new(
                ErrorCode::Conflict,
                format!("request id {} was used for another request", id.0),
            );
            match immediate(Err(fault)) {
                Ok(bytes) => bytes.into(),
                Err(_) => return,
            }
        }
    };
    if send.write_all(&bytes).await.is_ok() {
        let _ = send.finish();
    }
}

async fn accept_streams<C: Channel>(conn: Conn<C>, inbound: mpsc::Sender<Inbound<C>>) {
    while let Ok(recv) = conn.quic.accept_uni().await {
        if inbound
            .send(Inbound::Stream(StreamReceiver {
                recv,
                conn: conn.clone(),
                gulps: Gulps::default(),
                payload: Vec::new(),
            }))
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn accept_datagrams<C: Channel>(conn: Conn<C>, inbound: mpsc::Sender<Inbound<C>>) {
    while let Ok(bytes) = conn.quic.read_datagram().await {
        let max = conn.limits.max_datagram_bytes;
        let Ok(datagram) = conn.decoded(decode::<C::Datagram>(&bytes, conn.version, C::ID, max))
        else {
            return;
        };
        match inbound.try_send(Inbound::Datagram(datagram)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                conn.counters.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                conn.stats.datagram_dropped(C::ID);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}
