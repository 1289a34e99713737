//! The Flight service: `DoPut` speaks Zerobus; every other method is `UNIMPLEMENTED`.

use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::stream::Empty as Nothing;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::limits::Pace;
use super::socket::KillSwitch;
use super::wal::Wal;
use super::{Fault, Shared, delta, frame, requirements};

type Reply = Result<PutResult, Status>;
type Unimplemented<T> = Nothing<Result<T, Status>>;

pub(crate) struct Service {
    shared: Arc<Shared>,
}

impl Service {
    pub(crate) fn new(shared: Arc<Shared>) -> Service {
        Service { shared }
    }
}

/// Releases the table's open-call count when the call ends.
struct OpenCall {
    shared: Arc<Shared>,
    table: String,
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        if let Some(t) = self.shared.lock().tables.get_mut(&self.table) {
            t.open = t.open.saturating_sub(1);
        }
    }
}

fn put_result(json: String) -> PutResult {
    PutResult {
        app_metadata: json.into_bytes().into(),
    }
}

fn ack(last_offset: i64, rows: u64) -> PutResult {
    put_result(format!(
        "{{\"ack_up_to_offset\":{last_offset},\"ack_up_to_records\":{rows}}}"
    ))
}

fn header<'a>(request: &'a Request<Streaming<FlightData>>, name: &str) -> Option<&'a str> {
    request.metadata().get(name).and_then(|v| v.to_str().ok())
}

#[tonic::async_trait]
impl FlightService for Service {
    type HandshakeStream = Unimplemented<HandshakeResponse>;
    type ListFlightsStream = Unimplemented<FlightInfo>;
    type DoGetStream = Unimplemented<FlightData>;
    type DoPutStream = UnboundedReceiver<Reply>;
    type DoExchangeStream = Unimplemented<FlightData>;
    type DoActionStream = Unimplemented<arrow_flight::Result>;
    type ListActionsStream = Unimplemented<ActionType>;

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let shared = &self.shared;
        let extensions = request.extensions();
        let switch = extensions.get::<KillSwitch>().cloned().or_else(|| {
            extensions
                .get::<tonic::transport::server::TlsConnectInfo<KillSwitch>>()
                .map(|info| info.get_ref().clone())
        });
        if let Some(s) = &switch {
            let mut watched = shared
                .switches
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            watched.retain(super::socket::Watch::alive);
            watched.push(s.watch());
        }
        let table = header(&request, "x-databricks-zerobus-table-name").map(str::to_owned);
        let agent = header(&request, "user-agent").map(str::to_owned);
        let token = header(&request, "authorization")
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).to_owned());
        let (fault, call) = {
            let mut state = shared.lock();
            state.stats.calls += 1;
            if let Some(a) = agent {
                state.stats.user_agents.insert(a);
            }
            let refuse = |state: &mut super::State, status: Status| {
                *state
                    .stats
                    .refused
                    .entry(format!("{:?}", status.code()))
                    .or_default() += 1;
                Err(status)
            };
            let Some(table) = table else {
                return refuse(
                    &mut state,
                    Status::invalid_argument("missing x-databricks-zerobus-table-name header"),
                );
            };
            if let Some(t) = &token {
                state.stats.tokens.push(t.clone());
                if state.rejected_tokens.contains(t) {
                    return refuse(
                        &mut state,
                        Status::unauthenticated(format!("token rejected for table {table}")),
                    );
                }
            }
            if let Some(why) =
                super::oauth::refusal(shared, &state.minted, token.as_deref(), &table)
            {
                return refuse(&mut state, Status::unauthenticated(why));
            }
            let limit = shared.config.max_streams_per_table;
            let t = state.tables.entry(table.clone()).or_default();
            let fault = t.faults.pop_front();
            if let Some(Fault::RejectOpen { code }) = fault {
                return refuse(
                    &mut state,
                    Status::new(code, format!("injected fault on {table}")),
                );
            }
            if limit.is_some_and(|n| t.open >= n) {
                let open = t.open;
                return refuse(
                    &mut state,
                    Status::resource_exhausted(format!(
                        "table {table} already has {open} open streams"
                    )),
                );
            }
            t.open += 1;
            let open = t.open;
            state.stats.max_open_per_table = state.stats.max_open_per_table.max(open);
            (
                fault,
                OpenCall {
                    shared: shared.clone(),
                    table,
                },
            )
        };
        let wal = {
            let mut wals = shared.wals.lock().await;
            match wals.get(&call.table) {
                Some(w) => w.clone(),
                None => {
                    let w = Wal::open(&shared.config.wal_dir, &call.table)
                        .await
                        .map_err(|e| Status::internal(format!("write-ahead log: {e}")))?;
                    wals.insert(call.table.clone(), w.clone());
                    w
                }
            }
        };
        let (out, replies) = unbounded();
        let conn = Connection {
            shared: shared.clone(),
            call,
            out,
            fault,
            switch,
            wal,
        };
        tokio::spawn(conn.run(request.into_inner()));
        Ok(Response::new(replies))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("handshake"))
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("list_flights"))
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("get_flight_info"))
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("poll_flight_info"))
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("get_schema"))
    }
    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented("do_get"))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("do_exchange"))
    }
    async fn do_action(
        &self,
        _: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("do_action"))
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("list_actions"))
    }
}

/// A validated record batch message.
struct Message {
    data: FlightData,
    offset: u64,
    rows: u64,
    batch: arrow_array::RecordBatch,
    /// Unacked-row permits the reader took for it (given back at its ack).
    permits: u32,
    /// When it was read: it is durable `ack_latency` later (latency is per message, not per
    /// group, so a stream's groups pipeline as the service's do).
    arrived: tokio::time::Instant,
}

/// A stream's rows read and not yet acked, and the permits that bound them
/// ([`EmulatorConfig::max_unacked_rows`](super::EmulatorConfig::max_unacked_rows)).
struct Unacked {
    rows: std::sync::atomic::AtomicU64,
    permits: Option<tokio::sync::Semaphore>,
}

/// What the reader hands the writer.
enum Item {
    Message(Box<Message>),
    /// The request stream ended: cleanly (half-close) or not.
    End,
}

/// One accepted call.
struct Connection {
    shared: Arc<Shared>,
    call: OpenCall,
    out: UnboundedSender<Reply>,
    fault: Option<Fault>,
    switch: Option<KillSwitch>,
    wal: Wal,
}

impl Connection {
    fn fail(&self, status: Status) {
        self.shared.lock().stats.errors += 1;
        let _ = self.out.unbounded_send(Err(status));
    }

    fn reply(&self, result: PutResult) {
        let _ = self.out.unbounded_send(Ok(result));
    }

    async fn run(self, mut input: Streaming<FlightData>) {
        let first = match input.message().await {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(_) => {
                self.shared.lock().stats.resets += 1;
                return;
            }
        };
        let schema = match frame::schema(&first) {
            Ok(s) => s,
            Err(status) => return self.fail(status),
        };
        if let Some(Fault::RejectSchema { causes }) = &self.fault {
            return self.fail(delta::schema_rejected(&self.call.table, causes, ""));
        }
        let watch = match requirements::at_open(&self.shared, &self.call.table).await {
            Ok(watch) => watch,
            Err(status) => return self.fail(status),
        };
        if let Some(catalog) = self.shared.config.catalog() {
            match delta::check_stream(&catalog, &self.call.table, &schema).await {
                Err(status) => return self.fail(status),
                Ok(columns) => {
                    if let Some(t) = self.shared.lock().tables.get_mut(&self.call.table) {
                        t.columns_at_open.get_or_insert(columns);
                    }
                }
            }
        }
        if self.fault == Some(Fault::HoldReady) {
            while let Ok(Some(_)) = input.message().await {}
            return;
        }
        self.shared.lock().stats.ready += 1;
        self.reply(ack(-1, 0));
        let (tx, rx) = mpsc::unbounded_channel();
        let max_decoded = self.shared.config.max_decoded_bytes;
        let out = self.out.clone();
        let shared = self.shared.clone();
        let bound = self
            .shared
            .config
            .max_unacked_rows
            .map(|rows| u32::try_from(rows.max(1)).unwrap_or(u32::MAX));
        let unacked = Arc::new(Unacked {
            rows: std::sync::atomic::AtomicU64::new(0),
            permits: bound.map(|n| tokio::sync::Semaphore::new(n as usize)),
        });
        let writer_unacked = unacked.clone();
        let reader = async move {
            let mut expected = 0u64;
            loop {
                let data = match input.message().await {
                    Ok(Some(d)) => d,
                    Ok(None) => {
                        shared.lock().stats.half_closes += 1;
                        break;
                    }
                    Err(_) => {
                        shared.lock().stats.resets += 1;
                        break;
                    }
                };
                let checked = frame::offset_id(&data.app_metadata).and_then(|offset| {
                    if offset == expected {
                        frame::batch(&data, &schema, max_decoded).map(|b| (offset, b))
                    } else {
                        Err(Status::invalid_argument(format!(
                            "Non-incremental offset: expected {expected}, got {offset}"
                        )))
                    }
                });
                match checked {
                    Ok((offset, decoded)) => {
                        expected += 1;
                        let codec = match decoded.codec {
                            Some(arrow_ipc::CompressionType::ZSTD) => "zstd",
                            Some(arrow_ipc::CompressionType::LZ4_FRAME) => "lz4",
                            Some(_) => "other",
                            None => "none",
                        };
                        *shared.lock().stats.codecs.entry(codec).or_default() += 1;
                        // At the bound, stop reading until acks give permits back (a message
                        // larger than the bound takes them all).
                        let permits = match (&unacked.permits, bound) {
                            (Some(sem), Some(n)) => {
                                let want = u32::try_from(decoded.rows).unwrap_or(u32::MAX).min(n);
                                match sem.acquire_many(want).await {
                                    Ok(p) => p.forget(),
                                    Err(_) => return,
                                }
                                want
                            }
                            _ => 0,
                        };
                        let now = unacked
                            .rows
                            .fetch_add(decoded.rows, std::sync::atomic::Ordering::SeqCst)
                            + decoded.rows;
                        {
                            let mut state = shared.lock();
                            state.stats.max_unacked_rows = state.stats.max_unacked_rows.max(now);
                        }
                        let item = Item::Message(Box::new(Message {
                            data,
                            offset,
                            rows: decoded.rows,
                            batch: decoded.batch,
                            permits,
                            arrived: tokio::time::Instant::now(),
                        }));
                        if tx.send(item).is_err() {
                            return;
                        }
                    }
                    Err(status) => {
                        shared.lock().stats.errors += 1;
                        let _ = out.unbounded_send(Err(status));
                        return;
                    }
                }
            }
            let _ = tx.send(Item::End);
        };
        tokio::spawn(reader);
        self.write(first, rx, writer_unacked, watch).await;
    }

    /// Group commit: log everything available, sync, ack; apply the connection's fault. A
    /// table recreated since the stream opened (`watch`) ends it before its group is logged.
    async fn write(
        self,
        schema: FlightData,
        mut rx: mpsc::UnboundedReceiver<Item>,
        unacked: Arc<Unacked>,
        watch: Option<requirements::Watch>,
    ) {
        let latency = self.shared.config.ack_latency;
        let limits = self.shared.config.stream_limits;
        let ready_at = tokio::time::Instant::now();
        let mut pace = limits.map(Pace::new);
        let max_group = match self.shared.config.max_messages_per_ack {
            0 => usize::MAX,
            n => n,
        };
        let mut schema = Some(schema);
        let (mut messages, mut rows, mut last) = (0u64, 0u64, -1i64);
        let mut rotation_deadline: Option<tokio::time::Instant> = None;
        let mut ended = false;
        while !ended {
            let first = match rotation_deadline {
                Some(at) => tokio::select! {
                    item = rx.recv() => item,
                    () = tokio::time::sleep_until(at) => break,
                },
                None => rx.recv().await,
            };
            let mut group = match first {
                Some(Item::Message(m)) => vec![*m],
                Some(Item::End) | None => break,
            };
            if !latency.is_zero() {
                tokio::time::sleep_until(group[0].arrived + latency).await;
            }
            // Under stream limits an ack covers about a tenth of a second's worth of rows and
            // bytes, so acks come steadily instead of in one burst per long hold: messages join
            // the group while it is below that, so the last one may take it over (a client whose
            // messages are larger gets larger acks; docs/performance.md, "Against the official
            // client").
            let (mut group_rows, mut group_bytes) = (group[0].rows, frame_bytes(&group[0].data));
            while group.len() < max_group
                && limits.is_none_or(|l| {
                    group_rows < l.rows_per_sec / 10 && group_bytes < l.bytes_per_sec / 10
                })
            {
                match rx.try_recv() {
                    Ok(Item::Message(m)) => {
                        group_rows += m.rows;
                        group_bytes += frame_bytes(&m.data);
                        group.push(*m);
                    }
                    Ok(Item::End) => {
                        ended = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            let mut frames = Vec::with_capacity(group.len());
            let mut batches = Vec::with_capacity(group.len());
            let (mut group_rows, mut group_permits) = (0u64, 0u32);
            for m in group {
                frames.push(m.data);
                batches.push(m.batch);
                rows += m.rows;
                group_rows += m.rows;
                group_permits = group_permits.saturating_add(m.permits);
                last = i64::try_from(m.offset).unwrap_or(i64::MAX);
                messages += 1;
            }
            if let Some(Err(status)) = watch.as_ref().map(|w| w.unchanged(&self.shared)) {
                return self.fail(status);
            }
            if let Err(e) = self.wal.append(schema.take().as_ref(), &frames).await {
                return self.fail(Status::internal(format!(
                    "write-ahead log {}: {e}",
                    self.wal.path().display()
                )));
            }
            {
                let mut state = self.shared.lock();
                state.stats.messages += frames.len() as u64;
                state.stats.rows += batches.iter().map(|b| b.num_rows() as u64).sum::<u64>();
                if self.shared.config.keep_batches
                    && let Some(t) = state.tables.get_mut(&self.call.table)
                {
                    t.batches.extend(batches);
                }
            }
            match self.fault {
                Some(Fault::DropAfter { logged }) if logged.reached(messages, rows) => {
                    if let Some(s) = &self.switch {
                        tracing::debug!(peer = %s.peer, table = %self.call.table, "cutting the connection");
                        s.kill();
                    }
                    return;
                }
                Some(Fault::FailAfter { logged, code }) if logged.reached(messages, rows) => {
                    let table = &self.call.table;
                    return self.fail(Status::new(code, format!("injected fault on {table}")));
                }
                Some(Fault::ForwardAckAfter { logged }) if logged.reached(messages, rows) => {
                    self.shared.lock().stats.acks += 1;
                    self.reply(ack(last, rows + 1_000));
                    continue;
                }
                _ => {}
            }
            if let Some(pace) = &mut pace {
                let hold = pace.hold(group_rows, group_bytes, ready_at.elapsed());
                if !hold.is_zero() {
                    self.shared.lock().stats.throttled_acks += 1;
                    tokio::time::sleep(hold).await;
                }
            }
            self.shared.lock().stats.acks += 1;
            self.reply(ack(last, rows));
            if let Some(Fault::RepeatAcks { times }) = self.fault {
                self.shared.lock().stats.repeated_acks += u64::from(times);
                for _ in 0..times {
                    self.reply(ack(last, rows));
                }
            }
            unacked
                .rows
                .fetch_sub(group_rows, std::sync::atomic::Ordering::SeqCst);
            if let Some(sem) = &unacked.permits {
                sem.add_permits(group_permits as usize);
            }
            if let Some(Fault::StuckAfter { acked, every }) = self.fault
                && acked.reached(messages, rows)
            {
                return self.stuck(rx, &unacked, ack(last, rows), every).await;
            }
            if let Some(Fault::RotateAfter { acked, grace }) = self.fault
                && acked.reached(messages, rows)
                && rotation_deadline.is_none()
            {
                let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
                self.reply(put_result(format!(
                    "{{\"ack_up_to_offset\":{last},\"ack_up_to_records\":{rows},\"close_stream_duration_ms\":{ms}}}"
                )));
                rotation_deadline =
                    Some(tokio::time::Instant::now() + grace.max(Duration::from_millis(1)));
            }
        }
        // Ending here (dropping `out`) ends the call with OK.
        drop(self.call);
    }
}

impl Connection {
    /// [`Fault::StuckAfter`]: reads on, logs and acks nothing more, and repeats `last` every
    /// `every` until the client gives up on the call.
    async fn stuck(
        self,
        mut rx: mpsc::UnboundedReceiver<Item>,
        unacked: &Unacked,
        last: PutResult,
        every: Duration,
    ) {
        let table = &self.call.table;
        tracing::debug!(table, "stuck: repeating the last ack, logging nothing more");
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
        tick.tick().await;
        loop {
            tokio::select! {
                item = rx.recv() => match item {
                    Some(Item::Message(m)) => {
                        // Dropped unlogged: not durable, so the client must replay it.
                        unacked.rows.fetch_sub(m.rows, std::sync::atomic::Ordering::SeqCst);
                        if let Some(sem) = &unacked.permits {
                            sem.add_permits(m.permits as usize);
                        }
                    }
                    Some(Item::End) | None => break,
                },
                _ = tick.tick() => {
                    if self.out.is_closed() {
                        break;
                    }
                    self.shared.lock().stats.repeated_acks += 1;
                    self.reply(last.clone());
                }
            }
        }
        drop(self.call);
    }
}

/// A message's size on the wire (what the stream limits count).
fn frame_bytes(data: &FlightData) -> u64 {
    (data.data_header.len() + data.data_body.len()) as u64
}
