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

/// The PEM files of a [`Pki`], in a directory of their own.
struct PkiFiles {
    _dir: tempfile::TempDir,
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

impl Pki {
    fn files(&self) -> PkiFiles {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).unwrap();
            path.to_str().unwrap().to_owned()
        };
        PkiFiles {
            ca: write("ca.pem", &self.ca),
            server_cert: write("server.pem", &self.server_cert),
            server_key: write("server.key", &self.server_key),
            client_cert: write("client.pem", &self.client_cert),
            client_key: write("client.key", &self.client_key),
            _dir: dir,
        }
    }
}

/// A server that asks clients for a certificate of the test's CA, with `extra` flags.
fn mutual_tls_server(files: &PkiFiles, extra: &[&str]) -> Server {
    let mut args = vec![
        "--tls-cert",
        &files.server_cert,
        "--tls-key",
        &files.server_key,
        "--tls-client-ca",
        &files.ca,
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
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
    let files = pki.files();
    let server = mutual_tls_server(&files, &[]);

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

/// Runs `rankwatch query ARGS`.
fn query(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .arg("query")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_speaks_mutual_tls_with_a_client_certificate() {
    let pki = pki();
    let files = pki.files();
    let server = mutual_tls_server(&files, &["--wall-clock-advance", "false"]);
    let (ca, client_cert, client_key) = (&files.ca, &files.client_cert, &files.client_key);
    let mut client = connect(&server, &pki, true).await.unwrap();
    client.ingest_batch(batch()).await.unwrap();

    let addr = server.grpc.to_string();
    let trusting = [
        "--grpc-addr",
        &addr,
        "--tls-ca-cert",
        ca,
        "--format",
        "json",
    ];
    let identity = [
        "--tls-client-cert",
        client_cert,
        "--tls-client-key",
        client_key,
    ];
    let named = |name| [&trusting[..], &["--tls-server-name", name]].concat();

    let output = query(&[&named("localhost")[..], &identity].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["counters"]["impressions"], 1);
    assert_eq!(
        report["groups"],
        serde_json::json!([]),
        "its list is still open"
    );

    let refused = |args: &[&str]| !query(args).status.success();
    assert!(
        refused(&named("localhost")),
        "a client without a certificate is refused"
    );
    assert!(
        refused(&[&named("elsewhere")[..], &identity].concat()),
        "a certificate for another name is refused"
    );
    assert!(
        refused(&["--grpc-addr", &addr]),
        "plaintext is refused on a TLS listener"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_says_what_to_change_after_a_tls_mistake() {
    let files = pki().files();
    let server = mutual_tls_server(&files, &[]);
    let addr = server.grpc.to_string();
    let stderr = |args: &[&str]| {
        let output = query(&[&["--grpc-addr", addr.as_str()][..], args].concat());
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };

    let plaintext = stderr(&[]);
    assert!(
        plaintext.contains("hint: the server may speak TLS") && plaintext.contains("--tls-ca-cert"),
        "{plaintext}"
    );

    let other = pki().files();
    let wrong_ca = stderr(&["--tls-ca-cert", &other.ca, "--tls-server-name", "localhost"]);
    assert!(
        wrong_ca
            .contains("hint: the server's certificate is not signed by the CA of --tls-ca-cert"),
        "{wrong_ca}"
    );

    let wrong_name = stderr(&["--tls-ca-cert", &files.ca, "--tls-server-name", "elsewhere"]);
    assert!(
        wrong_name.contains("--tls-server-name with a name its certificate carries"),
        "{wrong_name}"
    );

    let no_identity = stderr(&["--tls-ca-cert", &files.ca, "--tls-server-name", "localhost"]);
    assert!(
        no_identity.contains("hint: the server asks for a client certificate"),
        "{no_identity}"
    );

    // TLS to the HTTP listener, the easy mix-up of the two ports: the hint
    // had said only to drop --tls-ca-cert.
    let output = query(&[
        "--grpc-addr",
        &server.http.to_string(),
        "--tls-ca-cert",
        &files.ca,
    ]);
    let http_port = String::from_utf8_lossy(&output.stderr);
    assert!(
        http_port.contains("check that it is the gRPC listener's (grpc_addr, not the HTTP one)"),
        "{http_port}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_says_when_the_server_speaks_tls() {
    let files = pki().files();
    let server = Server::start(&[
        "--tls-cert",
        &files.server_cert,
        "--tls-key",
        &files.server_key,
    ]);
    let target = format!("http://{}", server.grpc);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args([
            "loadgen",
            "--target",
            &target,
            "--duration",
            "1s",
            "--rate",
            "100",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("hint: the server may speak TLS") && stderr.contains("plaintext gRPC only"),
        "{stderr}"
    );
}

#[test]
fn unusable_tls_files_stop_the_server_before_it_serves_naming_the_setting() {
    use common::server::{exit_of, serve_command};
    let files = pki().files();
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let garbage = garbage.to_str().unwrap();
    let folder = dir.path().to_str().unwrap();
    let pipe = dir.path().join("pipe.pem");
    let made = std::process::Command::new("mkfifo").arg(&pipe).status();
    assert!(made.unwrap().success());
    let pipe = pipe.to_str().unwrap();
    let (cert, key, ca) = (&*files.server_cert, &*files.server_key, &*files.ca);
    for (args, setting, says) in [
        (
            vec!["--tls-cert", garbage, "--tls-key", key],
            "tls_cert",
            "no PEM certificate",
        ),
        (
            vec!["--tls-cert", key, "--tls-key", cert],
            "tls_cert",
            "no PEM certificate",
        ),
        (
            vec!["--tls-cert", cert, "--tls-key", garbage],
            "tls_key",
            "no PEM private key",
        ),
        (
            vec![
                "--tls-cert",
                cert,
                "--tls-key",
                key,
                "--tls-client-ca",
                garbage,
            ],
            "tls_client_ca",
            "no PEM certificate",
        ),
        (
            vec!["--tls-cert", cert, "--tls-key", &*files.client_key],
            "tls_key",
            "is the key the certificate's?",
        ),
        (
            vec!["--tls-cert", folder, "--tls-key", key],
            "tls_cert",
            "directory",
        ),
        (
            vec!["--tls-cert", "/dev/zero", "--tls-key", key],
            "tls_cert",
            "longer than",
        ),
        // Opening a named pipe no one writes to waits for good.
        (
            vec!["--tls-cert", cert, "--tls-key", pipe],
            "tls_key",
            "named pipe",
        ),
    ] {
        let (code, stderr) = exit_of(&mut serve_command(&args));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(setting) && stderr.contains(says),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("rankwatch serving"), "{args:?}: {stderr}");
    }
    // The query command names its own flags.
    for (args, flag) in [
        (vec!["--tls-ca-cert", garbage], "--tls-ca-cert"),
        (vec!["--tls-ca-cert", "/dev/zero"], "--tls-ca-cert"),
        (
            vec![
                "--tls-ca-cert",
                ca,
                "--tls-client-cert",
                cert,
                "--tls-client-key",
                garbage,
            ],
            "--tls-client-key",
        ),
    ] {
        let output = query(&[&["--grpc-addr", "127.0.0.1:9"][..], &args].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}
