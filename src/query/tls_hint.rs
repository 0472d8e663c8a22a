//! What to change when a query fails for a TLS reason. rustls and h2 name
//! the failure in their own terms (`h2 protocol error`, `UnknownIssuer`,
//! `received fatal alert: BadCertificate`); the hint says it in the
//! command's: which flag to pass or which certificate to fix.

/// The hint when the server asks for a client certificate and refused the
/// one given, or closed the connection when none was.
pub const MISSING_IDENTITY: &str = "the server asks for a client certificate (its tls_client_ca is set) and refused this one, or its absence: pass --tls-client-cert and --tls-client-key, an X.509 v3 certificate signed by that CA";

/// A sentence to add to a failed query's error, or `None` when its text
/// names no TLS mistake. `error` is the error with its sources; `tls` tells
/// whether the query spoke TLS (`--tls-ca-cert` given).
pub fn hint(error: &str, tls: bool) -> Option<&'static str> {
    let has = |needle: &str| error.contains(needle);
    if !tls {
        // A TLS listener answers a plaintext HTTP/2 preface with a TLS
        // alert, which h2 reads as a broken frame, and closes the
        // connection, which a busy client may see before the alert, or
        // before it could send its request ("connection was not ready").
        let plaintext_to_tls = has("h2 protocol error")
            || has("frame with invalid size")
            || has("connection reset")
            || has("connection closed")
            || has("connection was not ready")
            || has("broken pipe")
            || has("http2 error");
        return plaintext_to_tls.then_some(
            "the server may speak TLS (its tls_cert is set): pass --tls-ca-cert with the PEM certificate of the CA that signed its certificate; or it closed the connection at one of its limits (grpc_report_timeout, max_grpc_connections: see its rankwatch_grpc_connections_*_total)",
        );
    }
    if has("UnsupportedCertVersion") {
        return Some("a certificate is not X.509 version 3: rustls accepts v3 certificates only; issue it again as v3 (with openssl, use `openssl x509 -req ... -extfile` with a subjectAltName)");
    }
    if has("BadCertificate")
        || has("UnsupportedCertificate")
        || has("CertificateRequired")
        || has("UnknownCA")
    {
        return Some(MISSING_IDENTITY);
    }
    if has("UnknownIssuer") || has("BadSignature") {
        return Some("the server's certificate is not signed by the CA of --tls-ca-cert: pass the CA that signed the server's tls_cert");
    }
    if has("NotValidForName") {
        return Some("the server's certificate is not for this name: pass --tls-server-name with a name its certificate carries");
    }
    if has("CaUsedAsEndEntity") {
        return Some("the server presents a CA certificate as its own: its tls_cert must be a leaf certificate signed by a CA, with the server's name");
    }
    if has("Expired") || has("NotValidYet") {
        return Some("a certificate is outside its validity period: check the clocks and the certificates' dates");
    }
    if has("InvalidContentType") || has("CorruptMessage") {
        return Some("the server does not speak TLS on this address: check that it is the gRPC listener's (grpc_addr, not the HTTP one) and that its tls_cert is set, or drop --tls-ca-cert");
    }
    None
}

/// The error and each of its sources, `: `-separated, with their debug
/// forms too: rustls names a certificate's problem only there.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{error} {error:?}");
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause} {cause:?}"));
        source = cause.source();
    }
    text
}

/// The error and each of its sources as people read them, `: `-separated,
/// leaving out a source that the text so far already ends with.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::hint;

    #[test]
    fn each_mistake_gets_its_remedy() {
        let plaintext = hint(
            "status: Internal, message: \"h2 protocol error: http2 error\"",
            false,
        );
        assert!(plaintext.unwrap().contains("--tls-ca-cert"));
        assert!(hint("h2 protocol error", true).is_none());
        assert!(hint("invalid peer certificate: UnknownIssuer", true)
            .unwrap()
            .contains("not signed by the CA"));
        assert!(hint("received fatal alert: BadCertificate", true)
            .unwrap()
            .contains("asks for a client certificate"));
        assert!(hint("UnsupportedCertVersion", true)
            .unwrap()
            .contains("version 3"));
        assert!(hint("NotValidForName", true)
            .unwrap()
            .contains("--tls-server-name"));
        assert!(hint("connection refused", false).is_none());
    }

    #[test]
    fn a_tls_listener_that_closes_a_plaintext_stream_gets_the_plaintext_remedy() {
        // As the load generator saw it on a loaded machine: the listener
        // closed the connection before h2 read its alert.
        let closed = "ingest stream failed: code: 'The operation was cancelled', message: \"operation was canceled\", source: tonic::transport::Error(Transport, hyper::Error(Canceled, \"connection closed\"))";
        assert!(hint(closed, false).unwrap().contains("may speak TLS"));
    }
}
