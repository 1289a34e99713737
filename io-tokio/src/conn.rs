//! One connection: one `DoPut` on its own HTTP/2 connection (as the official client does by
//! default), run as its own task. It connects, presents the headers, sends the schema, reports
//! READY, acks, rotation requests and the end of the call to the driver as core inputs, and
//! encodes and sends the messages the driver hands it. It never decides anything: what to send,
//! when to give up and when to close are the core's decisions.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, PutResult};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::SchemaRef;
use futures::channel::mpsc as fmpsc;
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tracing::Instrument;
use zerobus_sink::{Code, ConnGen, Input, SchemaCause, SlotId, StreamError};

use crate::auth::TokenSource;
use crate::wire::{self, Response};

/// What a connection needs to know, shared by every connection of a table.
#[derive(Debug)]
pub(crate) struct TableWire {
    pub(crate) name: String,
    pub(crate) schema: SchemaRef,
}

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) endpoint: String,
    pub(crate) user_agent: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) tls_ca_pem: Option<Vec<u8>>,
    pub(crate) options: IpcWriteOptions,
    pub(crate) tokens: TokenSource,
}

/// From the driver to a connection.
#[derive(Debug)]
pub(crate) enum Command {
    /// Encode and send this batch as wire message `offset`.
    Send {
        batch: RecordBatch,
        wire_offset: u64,
    },
    /// Half-close the request; keep reading until the service ends the call.
    HalfClose,
}

/// From a connection to the driver.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) slot: SlotId,
    pub(crate) conn: ConnGen,
    pub(crate) input: Input,
}

/// A running connection: dropping the handle (or aborting the task) cuts it.
#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) conn: ConnGen,
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Handle {
    /// Half-closes and lets the call end on its own (the service sends its last acks and an OK
    /// status), for at most `drain`; then cuts it.
    pub(crate) async fn finish(mut self, drain: Duration) {
        let _ = self.commands.send(Command::HalfClose);
        if let Some(task) = self.task.as_mut()
            && tokio::time::timeout(drain, task).await.is_err()
        {
            tracing::debug!(conn = %self.conn, "the call did not end within the drain window");
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts a connection for `slot`.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    table: Arc<TableWire>,
    slot: SlotId,
    conn: ConnGen,
    events: mpsc::UnboundedSender<Event>,
) -> Handle {
    let (commands, rx) = mpsc::unbounded_channel();
    let span = tracing::info_span!("stream", table = %table.name, %slot, %conn);
    let task = tokio::spawn(
        async move {
            let report = |input: Input| {
                let _ = events.send(Event { slot, conn, input });
            };
            let end = run(&shared, &table, slot, conn, rx, &report).await;
            tracing::debug!(?end, "connection ended");
            report(end);
        }
        .instrument(span),
    );
    Handle {
        conn,
        commands,
        task: Some(task),
    }
}

/// A status as the core sees it: `SCHEMA_VALIDATION_FAILED` details (domain
/// `zerobus.databricks.com` or empty) make it a schema rejection, as in the official client
/// (PROTOCOL.md C.2); anything else is its code and message.
pub(crate) fn status_error(status: &tonic::Status) -> StreamError {
    use tonic_types::StatusExt;
    if let Some(info) = status.get_details_error_info()
        && info.reason == "SCHEMA_VALIDATION_FAILED"
        && (info.domain == "zerobus.databricks.com" || info.domain.is_empty())
    {
        let causes = info.metadata.get("causes").map_or("", String::as_str);
        return StreamError::SchemaRejected {
            causes: SchemaCause::parse_list(causes),
            error_code: info.metadata.get("error_code").cloned(),
            message: status.message().to_owned(),
        };
    }
    StreamError::Status {
        code: Code::from_i32(status.code() as i32),
        message: status.message().to_owned(),
    }
}

fn transport(message: impl Into<String>) -> StreamError {
    StreamError::Transport {
        message: message.into(),
    }
}

async fn channel(shared: &Shared) -> Result<Channel, StreamError> {
    let mut endpoint = Endpoint::from_shared(shared.endpoint.clone())
        .map_err(|e| transport(format!("bad endpoint {}: {e}", shared.endpoint)))?
        .connect_timeout(shared.connect_timeout)
        .tcp_nodelay(true)
        .http2_adaptive_window(true)
        .user_agent(shared.user_agent.clone())
        .map_err(|e| transport(format!("bad user agent: {e}")))?;
    if shared.endpoint.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_webpki_roots();
        if let Some(pem) = &shared.tls_ca_pem {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| transport(format!("TLS for {}: {e}", shared.endpoint)))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| transport(format!("connect to {}: {e}", shared.endpoint)))
}

/// Runs the call; returns the input that ends it.
async fn run(
    shared: &Shared,
    table: &TableWire,
    slot: SlotId,
    conn: ConnGen,
    mut commands: mpsc::UnboundedReceiver<Command>,
    report: &impl Fn(Input),
) -> Input {
    let failed = |error: StreamError| Input::Failed { slot, conn, error };
    let token = match shared.tokens.token(&table.name).await {
        Ok(t) => t,
        Err(e) if e.is_retryable() => return failed(transport(e.to_string())),
        Err(e) => {
            return failed(StreamError::Status {
                code: Code::Unauthenticated,
                message: e.to_string(),
            });
        }
    };
    let channel = match channel(shared).await {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let (requests, request_stream) = fmpsc::unbounded::<FlightData>();
    let _ = requests.unbounded_send(wire::schema_message(&table.schema, &shared.options));
    let mut request = tonic::Request::new(request_stream);
    let md = request.metadata_mut();
    match MetadataValue::try_from(table.name.as_str()) {
        Ok(v) => {
            md.insert("x-databricks-zerobus-table-name", v);
        }
        Err(_) => {
            return failed(transport(format!(
                "table name {:?} is not a valid header",
                table.name
            )));
        }
    }
    if let Some(token) = token {
        match MetadataValue::try_from(format!("Bearer {}", token.expose())) {
            Ok(mut v) => {
                v.set_sensitive(true);
                md.insert("authorization", v);
            }
            Err(_) => return failed(transport("the token is not a valid header value")),
        }
    }
    let mut client = FlightServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let mut responses = match client.do_put(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status_error(&status)),
    };
    let mut requests = Some(requests);
    let mut context = arrow_ipc::writer::IpcWriteContext::default();
    let mut ready = false;
    loop {
        tokio::select! {
            message = responses.message() => match message {
                Ok(Some(result)) => {
                    if let Err(end) = on_put_result(&result, &mut ready, slot, conn, report) {
                        return end;
                    }
                }
                Ok(None) if ready => return Input::Closed { slot, conn },
                Ok(None) => return failed(StreamError::Status {
                    code: Code::Internal,
                    message: "the call ended before READY".into(),
                }),
                Err(status) => return failed(status_error(&status)),
            },
            command = commands.recv(), if requests.is_some() => match command {
                Some(Command::Send { batch, wire_offset }) => {
                    match wire::batch_message(&batch, wire_offset, &shared.options, &mut context) {
                        Ok(data) => {
                            if let Some(r) = &requests {
                                let _ = r.unbounded_send(data);
                            }
                        }
                        Err(e) => {
                            return failed(transport(format!("encoding wire offset {wire_offset}: {e}")));
                        }
                    }
                }
                Some(Command::HalfClose) => {
                    tracing::debug!("half-closing");
                    requests = None;
                }
                // The driver is gone: nothing will read what this connection reports.
                None => return failed(transport("the driver stopped")),
            },
        }
    }
}

/// Acts on one `PutResult`: reports READY, acks and rotation requests; `Err` is the input that
/// ends the connection (anything but READY first, PROTOCOL.md A.3). Unparseable metadata after
/// READY is logged and ignored, as the official client does.
fn on_put_result(
    result: &PutResult,
    ready: &mut bool,
    slot: SlotId,
    conn: ConnGen,
    report: &impl Fn(Input),
) -> Result<(), Input> {
    let parsed = wire::parse(result);
    match parsed {
        Ok(Response::Ready) if !*ready => {
            *ready = true;
            report(Input::Ready { slot, conn });
        }
        Ok(Response::Ready) => {}
        _ if !*ready => {
            let error = transport(format!("unexpected first response (not READY): {parsed:?}"));
            return Err(Input::Failed { slot, conn, error });
        }
        Ok(Response::Ack {
            up_to_records,
            close_after_ms,
        }) => {
            if up_to_records > 0 {
                report(Input::Acked {
                    slot,
                    conn,
                    up_to_records,
                });
            }
            if let Some(ms) = close_after_ms {
                let grace = Duration::from_millis(ms);
                report(Input::Rotate { slot, conn, grace });
            }
        }
        Err(e) => tracing::warn!(error = %e, "ignoring a PutResult"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use tonic_types::{ErrorDetails, StatusExt};

    fn with_info(reason: &str, domain: &str) -> tonic::Status {
        let metadata = HashMap::from([
            (
                "causes".to_owned(),
                "TYPE_INCOMPATIBLE, FIELD_NOT_IN_TABLE,NEW_ONE".to_owned(),
            ),
            ("error_code".to_owned(), "8001".to_owned()),
        ]);
        tonic::Status::with_error_details(
            tonic::Code::InvalidArgument,
            "schema mismatch",
            ErrorDetails::with_error_info(reason, domain, metadata),
        )
    }

    #[test]
    fn schema_validation_details_become_a_schema_rejection() {
        for domain in ["zerobus.databricks.com", ""] {
            let StreamError::SchemaRejected {
                causes,
                error_code,
                message,
            } = status_error(&with_info("SCHEMA_VALIDATION_FAILED", domain))
            else {
                panic!("not a schema rejection for domain {domain:?}");
            };
            assert_eq!(
                causes,
                [
                    SchemaCause::TypeIncompatible,
                    SchemaCause::FieldNotInTable,
                    SchemaCause::Unknown("NEW_ONE".into())
                ]
            );
            assert_eq!(
                (error_code.as_deref(), message.as_str()),
                (Some("8001"), "schema mismatch")
            );
        }
        for (reason, domain) in [("SCHEMA_VALIDATION_FAILED", "example.com"), ("OTHER", "")] {
            assert!(matches!(
                status_error(&with_info(reason, domain)),
                StreamError::Status {
                    code: Code::InvalidArgument,
                    ..
                }
            ));
        }
    }
}
