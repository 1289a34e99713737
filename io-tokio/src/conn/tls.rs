//! The platform's root certificates (rustls-native-certs: the OS store, or `SSL_CERT_FILE` /
//! `SSL_CERT_DIR`), as PEM certificates for tonic's TLS configuration. Loaded once per sink;
//! a platform without a store adds none (the bundled webpki roots still apply), and a
//! certificate that does not load is logged at DEBUG and skipped.

use base64::Engine;
use tonic::transport::Certificate;

pub(crate) fn native_roots() -> Vec<Certificate> {
    let found = rustls_native_certs::load_native_certs();
    if !found.errors.is_empty() {
        tracing::debug!(errors = ?found.errors, "some platform root certificates did not load");
    }
    found
        .certs
        .iter()
        .map(|der| Certificate::from_pem(pem(der.as_ref())))
        .collect()
}

/// DER as one PEM certificate.
fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 60);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}
