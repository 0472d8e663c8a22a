//! TLS and mutual TLS on the gRPC listener, with certificates made for the test.

mod common;

use common::server::{event_from_json, Server};
use rankwatch::proto::{collector_client::CollectorClient, EventBatch};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("serving-pod");
    Pki {
        ca: ca.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

async fn connect(
    server: &Server,
    pki: &Pki,
    with_identity: bool,
) -> Result<CollectorClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca))
        .domain_name("localhost");
    if with_identity {
        tls = tls.identity(Identity::from_pem(&pki.client_cert, &pki.client_key));
    }
    let channel = Channel::from_shared(format!("https://{}", server.grpc))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(CollectorClient::new(channel))
}

fn batch() -> EventBatch {
    let event = event_from_json(
        r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}"#,
    );
    EventBatch {
        sequence: 1,
        events: vec![event.unwrap()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_clients_with_a_certificate() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (cert, key, ca) = (
        write("server.pem", &pki.server_cert),
        write("server.key", &pki.server_key),
        write("ca.pem", &pki.ca),
    );
    let server = Server::start(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ]);

    let mut client = connect(&server, &pki, true).await.unwrap();
    assert_eq!(
        client
            .ingest_batch(batch())
            .await
            .unwrap()
            .into_inner()
            .accepted,
        1
    );

    let refused = match connect(&server, &pki, false).await {
        Err(_) => true,
        Ok(mut client) => client.ingest_batch(batch()).await.is_err(),
    };
    assert!(refused, "a client without a certificate is refused");

    let plaintext = CollectorClient::connect(format!("http://{}", server.grpc)).await;
    let refused = match plaintext {
        Err(_) => true,
        Ok(mut client) => client.ingest_batch(batch()).await.is_err(),
    };
    assert!(refused, "plaintext is refused on a TLS listener");
}
