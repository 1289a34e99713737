//! One connection: one `DoPut` on its own HTTP/2 connection (as the official client does by
//! default), run as its own task. It connects, presents the headers, sends the schema, turns
//! every `PutResult` into an [`Input::Result`] (or [`Input::Unreadable`]), the end of the call
//! into [`Input::Closed`] or [`Input::Failed`]; the messages the driver hands it are encoded
//! and sent by the call's request body ([`body`]). It decides nothing: what a response means
//! (READY first, acks, rotations), what to send, when to give up and when to close are the
//! core's decisions.

pub(crate) mod auth;
mod body;
pub(crate) mod proxy;
pub(crate) mod tls;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::SchemaRef;
use tokio::sync::{mpsc, oneshot};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tracing::Instrument;
use zerobus_sink::{Code, ConnId, ErrorInfo, Input, Lane, StreamError};

use crate::conn::auth::TokenSource;
use crate::conn::proxy::Proxy;
use crate::wire;
use crate::wire::encode::Encoder;
use body::Body;

/// What a connection needs to know, shared by every connection of a table.
#[derive(Debug)]
pub(crate) struct TableWire {
    pub(crate) name: String,
    /// The stream's schema (for a provisioned table: of one batch schema, in the wire shape).
    pub(crate) schema: SchemaRef,
    /// Whether the table is provisioned through a catalog (its batches may drift).
    pub(crate) provisioned: bool,
}

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) endpoint: String,
    pub(crate) user_agent: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) tls_ca_pem: Option<Vec<u8>>,
    /// The platform's root certificates (PEM), loaded once at start; empty where there are none.
    pub(crate) native_roots: Vec<tonic::transport::Certificate>,
    /// The proxy to tunnel through, resolved for the endpoint's host at start.
    pub(crate) proxy: Option<Proxy>,
    pub(crate) options: IpcWriteOptions,
    pub(crate) tokens: TokenSource,
    /// The most Arrow bytes one wire message carries when small batches go together
    /// (`ZerobusConfig::coalesce_bytes`, or the sink's `max_message_bytes` if lower; 0: none).
    pub(crate) coalesce_bytes: u64,
}

/// From the driver to a connection.
#[derive(Debug)]
pub(crate) enum Command {
    /// Encode and send this batch: as a wire message of its own, or with the small batches
    /// handed over with it ([`Body`]'s coalescing).
    Send { batch: RecordBatch },
    /// Half-close the request; keep reading until the service ends the call.
    HalfClose,
}

/// A running connection: dropping the handle (or aborting the task) cuts it.
#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts the connection `conn` once `gate` allows it (a check of the table's role; its error
/// ends the connection before it is made); what happens on it reaches the driver as inputs.
pub(crate) fn spawn<L: Lane>(
    shared: Arc<Shared>,
    table: Arc<TableWire>,
    conn: ConnId<L>,
    events: mpsc::UnboundedSender<Input<L>>,
    gate: impl Future<Output = Result<(), StreamError>> + Send + 'static,
) -> Handle {
    let (commands, rx) = mpsc::unbounded_channel();
    // table > stream > connection: every event of the call names all three ids.
    let table_span = tracing::info_span!("table", table = %table.name);
    let stream_span = tracing::info_span!(parent: &table_span, "stream", slot = %conn.slot());
    let span = tracing::info_span!(parent: &stream_span, "connection", conn = %conn.generation());
    let task = tokio::spawn(
        async move {
            let report = |input: Input<L>| {
                let _ = events.send(input);
            };
            let end = match gate.await {
                Ok(()) => run(&shared, &table, conn, rx, &report).await,
                Err(error) => Input::Failed { conn, error },
            };
            tracing::debug!(?end, "connection ended");
            report(end);
        }
        .instrument(span),
    );
    Handle {
        commands,
        task: Some(task),
    }
}

/// A status as the core takes it: its code, its message and its `google.rpc.ErrorInfo` detail
/// if it has one (the core decides what `SCHEMA_VALIDATION_FAILED` means, PROTOCOL.md C.2).
pub(crate) fn status_error(status: &tonic::Status) -> StreamError {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info().map(|info| {
        Box::new(ErrorInfo {
            causes: info.metadata.get("causes").cloned(),
            error_code: info.metadata.get("error_code").cloned(),
            reason: info.reason,
            domain: info.domain,
        })
    });
    StreamError::Status {
        code: Code::from_i32(status.code() as i32),
        message: status.message().to_owned(),
        info,
    }
}

fn transport(message: impl Into<String>) -> StreamError {
    StreamError::Transport {
        message: message.into(),
    }
}

/// An error and every error under it, `: `-separated, so that the root cause (connection
/// refused, a certificate, a name that does not resolve) is in the message.
pub(crate) fn chain<E: std::error::Error>(error: &E) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

/// `host:port` of a URI, the scheme's port when it names none.
fn target(uri: &http::Uri) -> String {
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    format!("{}:{port}", uri.host().unwrap_or_default())
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
        let mut tls = ClientTlsConfig::new()
            .with_webpki_roots()
            .ca_certificates(shared.native_roots.iter().cloned());
        if let Some(pem) = &shared.tls_ca_pem {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| transport(format!("TLS for {}: {e}", shared.endpoint)))?;
    }
    let connected = match &shared.proxy {
        None => endpoint.connect().await,
        Some(proxy) => {
            let proxy = proxy.clone();
            let tunnel = tower::service_fn(move |uri: http::Uri| {
                let proxy = proxy.clone();
                async move { crate::conn::proxy::tunnel(&proxy, &target(&uri)).await }
            });
            endpoint.connect_with_connector(tunnel).await
        }
    };
    connected.map_err(|e| transport(format!("connect to {}: {}", shared.endpoint, chain(&e))))
}

/// Runs the call; returns the input that ends it.
async fn run<L: Lane>(
    shared: &Shared,
    table: &TableWire,
    conn: ConnId<L>,
    commands: mpsc::UnboundedReceiver<Command>,
    report: &impl Fn(Input<L>),
) -> Input<L> {
    let failed = |error: StreamError| Input::Failed { conn, error };
    let token = match shared.tokens.token(&table.name).await {
        Ok(t) => t,
        Err(e) => {
            return failed(StreamError::Credentials {
                retryable: e.is_retryable(),
                message: e.to_string(),
            });
        }
    };
    let channel = match channel(shared).await {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let (failure, mut failed_encoding) = oneshot::channel();
    let body = Body::new(
        wire::schema_message(&table.schema, &shared.options),
        commands,
        Encoder::new(shared.options.clone()),
        shared.coalesce_bytes,
        failure,
    );
    let mut request = tonic::Request::new(body);
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
    let mut encoding = true;
    loop {
        tokio::select! {
            message = responses.message() => match message {
                Ok(Some(result)) => report(match wire::parse(&result) {
                    Ok(result) => Input::Result { conn, result },
                    Err(e) => Input::Unreadable { conn, reason: e.to_string() },
                }),
                Ok(None) => return Input::Closed { conn },
                Err(status) => return failed(status_error(&status)),
            },
            // The body reports an encoding that failed (and ends); it drops the sender when it
            // ends otherwise.
            failure = &mut failed_encoding, if encoding => match failure {
                Ok(e) => return failed(transport(e.to_string())),
                Err(_) => encoding = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use tonic_types::{ErrorDetails, StatusExt};
    use zerobus_sink::SchemaCause;

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
    fn schema_validation_details_reach_the_core_which_makes_them_a_schema_rejection() {
        for domain in ["zerobus.databricks.com", ""] {
            let StreamError::SchemaRejected {
                causes,
                error_code,
                message,
            } = status_error(&with_info("SCHEMA_VALIDATION_FAILED", domain)).normalized()
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
                status_error(&with_info(reason, domain)).normalized(),
                StreamError::Status {
                    code: Code::InvalidArgument,
                    ..
                }
            ));
        }
    }
}
